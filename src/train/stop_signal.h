// Graceful stop: while a StopSignalScope lives, the first SIGINT or SIGTERM only sets a flag (the
// trainer then finishes its step, saves a checkpoint and returns); a second one ends the process.
#pragma once

namespace fp4 {

class StopSignalScope {
 public:
  StopSignalScope();   // installs the handlers and clears the flag
  ~StopSignalScope();  // restores the previous handlers
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

  // The signal received (SIGINT, SIGTERM), or 0.
  static int received();
};

}  // namespace fp4
