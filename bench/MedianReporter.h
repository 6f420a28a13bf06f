// A Google Benchmark reporter that forwards to the console or JSON reporter and records each
// benchmark's median real time (or its single run's), so that ratios come from one run.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>

namespace frank::bench {

class MedianReporter : public benchmark::BenchmarkReporter {
public:
  explicit MedianReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner)
      : inner_(std::move(inner)) {}

  /// The reporter --benchmark_format asks for: "json" or the console.
  static std::unique_ptr<MedianReporter> forFormat(const std::string &format) {
    std::unique_ptr<benchmark::BenchmarkReporter> inner;
    if (format == "json")
      inner = std::make_unique<benchmark::JSONReporter>();
    else
      inner = std::make_unique<benchmark::ConsoleReporter>();
    return std::make_unique<MedianReporter>(std::move(inner));
  }

  bool ReportContext(const Context &context) override {
    inner_->SetOutputStream(&GetOutputStream());
    inner_->SetErrorStream(&GetErrorStream());
    return inner_->ReportContext(context);
  }
  void ReportRuns(const std::vector<Run> &runs) override {
    for (const Run &run : runs) {
      std::string name = run.run_name.function_name;
      if (run.run_type == Run::RT_Iteration && !haveMedian_.count(name))
        seconds_[name] = run.GetAdjustedRealTime() * unitSeconds(run.time_unit);
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") {
        seconds_[name] = run.GetAdjustedRealTime() * unitSeconds(run.time_unit);
        haveMedian_[name] = true;
      }
    }
    inner_->ReportRuns(runs);
  }
  void Finalize() override { inner_->Finalize(); }

  /// Median seconds per iteration of `name`, or 0 if it did not run.
  double seconds(const std::string &name) const {
    auto it = seconds_.find(name);
    return it == seconds_.end() ? 0 : it->second;
  }

private:
  static double unitSeconds(benchmark::TimeUnit unit) {
    switch (unit) {
    case benchmark::kNanosecond: return 1e-9;
    case benchmark::kMicrosecond: return 1e-6;
    case benchmark::kMillisecond: return 1e-3;
    default: return 1;
    }
  }
  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
  std::map<std::string, double> seconds_;
  std::map<std::string, bool> haveMedian_;
};

} // namespace frank::bench
