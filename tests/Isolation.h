// Running a test body in a forked child: a crash fails that one case instead of ending the
// whole test binary, and the kind of exception that escaped is reported back.
#pragma once

#include "frank/Tensor.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

namespace frank::test {

struct Outcome {
  // Threw: a user error (frank::Error); Internal: a frank::InternalError, a bug.
  enum Kind { Ok, Threw, Internal, OtherException, Crashed } kind = Crashed;
  std::string text; // the body's result, or the exception's what()
  int status = 0;   // for Crashed: the signal or exit status
};

/// Runs `body` in a child process. The child must not rely on threads the parent started
/// (fork copies only the calling thread), so callers keep kernels out of the parent.
inline Outcome runIsolated(const std::function<std::string()> &body) {
  int fds[2];
  if (pipe(fds) != 0)
    return {Outcome::Crashed, std::string("pipe failed: ") + std::strerror(errno), 0};
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    return {Outcome::Crashed, std::string("fork failed: ") + std::strerror(errno), 0};
  if (pid == 0) {
    close(fds[0]);
    std::string message;
    try {
      std::string result = body();
      message = "O";
      message += result;
    } catch (const frank::InternalError &e) {
      message = std::string("I") + e.what();
    } catch (const frank::Error &e) {
      message = std::string("E") + e.what();
    } catch (const std::exception &e) {
      message = std::string("X") + typeid(e).name() + ": " + e.what();
    }
    const char *p = message.data();
    size_t left = message.size();
    while (left > 0) {
      ssize_t n = write(fds[1], p, left);
      if (n <= 0)
        _exit(3);
      p += n;
      left -= static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string received;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0)
    received.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status))
    return {Outcome::Crashed, "killed by signal " + std::to_string(WTERMSIG(status)),
            WTERMSIG(status)};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || received.empty())
    return {Outcome::Crashed, "child exited abnormally", status};
  Outcome out;
  switch (received[0]) {
  case 'O': out.kind = Outcome::Ok; break;
  case 'E': out.kind = Outcome::Threw; break;
  case 'I': out.kind = Outcome::Internal; break;
  default: out.kind = Outcome::OtherException; break;
  }
  out.text = received.substr(1);
  return out;
}

inline std::vector<std::string> splitLines(const std::string &text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

} // namespace frank::test
