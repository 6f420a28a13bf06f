// Running the frank-jit binary from tests: stdout, stderr and the exit status captured
// separately, with environment overrides, one at a time or several at once.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <optional>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace frank::test {

inline const std::string kBinary = FRANK_JIT_BINARY;

struct ToolResult {
  int exitCode = -1;     // valid when !signaled
  bool signaled = false; // the tool crashed (a crash is never an acceptable error report)
  int signal = 0;
  std::string out, err;
};

inline std::string readFile(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

inline void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream file(path, std::ios::binary);
  file << bytes;
}

inline bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// A path under the gtest temp dir, unique per test (tests may run in parallel under ctest).
inline std::string tempPath(const std::string &leaf) {
  const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string("frank_cli_") + info->test_suite_name() + "_" + info->name();
  // Parameterized tests are named "Prefix/Suite.Test/Case": keep them one file name.
  std::replace(name.begin(), name.end(), '/', '_');
  return ::testing::TempDir() + name + "_" + leaf;
}

/// Environment changes for a run: a value sets the variable, nullopt removes it.
using EnvOverrides = std::map<std::string, std::optional<std::string>>;

/// A frank-jit process that has been started; `waitTool` collects it.
struct RunningTool {
  pid_t pid = -1;
  std::string outPath, errPath;
};

/// Starts frank-jit with `args` (no shell, so '?' and '@' need no quoting). stdout and stderr go
/// to separate temp files so they are captured separately and without pipe deadlocks.
inline RunningTool spawnTool(const std::vector<std::string> &args, const EnvOverrides &env = {}) {
  static int counter = 0;
  std::string stem = tempPath("run" + std::to_string(counter++));
  RunningTool running{-1, stem + ".stdout", stem + ".stderr"};

  std::vector<std::string> argvStrings{kBinary};
  argvStrings.insert(argvStrings.end(), args.begin(), args.end());
  std::vector<char *> argv;
  for (std::string &s : argvStrings)
    argv.push_back(s.data());
  argv.push_back(nullptr);

  std::vector<std::string> envStrings;
  for (char **e = environ; *e; ++e) {
    std::string entry = *e;
    if (!env.count(entry.substr(0, entry.find('='))))
      envStrings.push_back(entry);
  }
  for (const auto &[name, value] : env)
    if (value)
      envStrings.push_back(name + "=" + *value);
  std::vector<char *> envp;
  for (std::string &s : envStrings)
    envp.push_back(s.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, running.outPath.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, running.errPath.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int rc = posix_spawn(&running.pid, kBinary.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    ADD_FAILURE() << "cannot spawn " << kBinary << ": " << std::strerror(rc);
    running.pid = -1;
  }
  return running;
}

inline ToolResult waitTool(const RunningTool &running) {
  ToolResult result;
  if (running.pid < 0)
    return result;
  int status = 0;
  while (waitpid(running.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    result.exitCode = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signaled = true;
    result.signal = WTERMSIG(status);
  }
  result.out = readFile(running.outPath);
  result.err = readFile(running.errPath);
  std::remove(running.outPath.c_str());
  std::remove(running.errPath.c_str());
  return result;
}

inline ToolResult runTool(const std::vector<std::string> &args, const EnvOverrides &env = {}) {
  return waitTool(spawnTool(args, env));
}

/// A readable dump for failure messages.
inline std::string describe(const ToolResult &r) {
  std::ostringstream os;
  if (r.signaled)
    os << "killed by signal " << r.signal;
  else
    os << "exit " << r.exitCode;
  os << "\n--- stdout ---\n" << r.out << "\n--- stderr ---\n" << r.err;
  return os.str();
}

} // namespace frank::test

#define EXPECT_SUCCESS(r) ASSERT_TRUE(!(r).signaled && (r).exitCode == 0) << describe(r)

// An error must be a clean exit 1 with nothing on stdout, never a crash.
#define EXPECT_FAILURE(r)                                                                          \
  do {                                                                                             \
    ASSERT_FALSE((r).signaled) << describe(r);                                                     \
    EXPECT_EQ((r).exitCode, 1) << describe(r);                                                     \
    EXPECT_EQ((r).out, "") << describe(r);                                                         \
  } while (0)
