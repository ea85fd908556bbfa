// A small reader of "--name value" and "--name=value" command-line options,
// for the commands of sparse-decode. Bad values throw CliError with a message
// naming the option, what it accepts and what it got.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparse_decode::cli {

class CliError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "a, b or c".
std::string join_choices(const std::vector<std::string>& choices);

class ArgReader {
 public:
  ArgReader(int argc, char** argv, int first) : args_(argv + (first < argc ? first : argc), argv + argc) {}

  bool done() const { return position_ >= args_.size() && !inline_value_; }
  // The next option's name: "--tokens" of "--tokens 6" or "--tokens=6".
  // Throws on a stray argument, or when the option before it was a flag
  // given a value ("--cpu=yes").
  std::string next_option();

  // The value of the option just read: after '=', else the next argument.
  std::string string_value(const std::string& option);
  int64_t int_value(const std::string& option, int64_t min, int64_t max);
  std::vector<int64_t> int_list(const std::string& option, int64_t min, int64_t max);  // "1,6,12"
  // A value out of `accepted`.
  std::string choice(const std::string& option, const std::vector<std::string>& accepted);
  int64_t int_choice(const std::string& option, std::initializer_list<int64_t> accepted);

 private:
  std::vector<std::string> args_;
  size_t position_ = 0;
  std::optional<std::string> inline_value_;  // of "--name=value", until read
  std::string last_option_;
};

// Whether the arguments from `first` on ask for help ("--help" or "-h").
bool asks_for_help(int argc, char** argv, int first);

}  // namespace sparse_decode::cli
