#include "cli_args.h"

#include <algorithm>
#include <charconv>

namespace sparse_decode::cli {
namespace {

int64_t parse_int(const std::string& option, const std::string& text, int64_t min, int64_t max) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || text.empty()) {
    throw CliError(option + ": expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                   "], got '" + text + "'");
  }
  if (value < min || value > max) {
    throw CliError(option + ": expected a value in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                   text);
  }
  return value;
}

}  // namespace

std::string join_choices(const std::vector<std::string>& choices) {
  std::string text;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) text += i + 1 == choices.size() ? " or " : ", ";
    text += choices[i];
  }
  return text;
}

std::string ArgReader::next_option() {
  if (inline_value_) throw CliError(last_option_ + ": takes no value, got '" + *inline_value_ + "'");
  const std::string& arg = args_.at(position_++);
  if (arg.rfind("--", 0) != 0 || arg.size() == 2) throw CliError("unexpected argument '" + arg + "'");
  const size_t equals = arg.find('=');
  if (equals != std::string::npos) inline_value_ = arg.substr(equals + 1);
  last_option_ = arg.substr(0, equals);
  return last_option_;
}

std::string ArgReader::string_value(const std::string& option) {
  if (inline_value_) {
    std::string value = std::move(*inline_value_);
    inline_value_.reset();
    if (value.empty()) throw CliError(option + ": expected a value after '='");
    return value;
  }
  if (position_ >= args_.size()) throw CliError(option + ": expected a value");
  const std::string& value = args_[position_];
  if (value.rfind("--", 0) == 0) throw CliError(option + ": expected a value, got the option " + value);
  ++position_;
  return value;
}

int64_t ArgReader::int_value(const std::string& option, int64_t min, int64_t max) {
  return parse_int(option, string_value(option), min, max);
}

std::vector<int64_t> ArgReader::int_list(const std::string& option, int64_t min, int64_t max) {
  const std::string text = string_value(option);
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t stop = comma == std::string::npos ? text.size() : comma;
    values.push_back(parse_int(option, text.substr(start, stop - start), min, max));
    start = stop + 1;
  }
  return values;
}

std::string ArgReader::choice(const std::string& option, const std::vector<std::string>& accepted) {
  std::string value = string_value(option);
  if (std::find(accepted.begin(), accepted.end(), value) == accepted.end()) {
    throw CliError(option + ": expected " + join_choices(accepted) + ", got '" + value + "'");
  }
  return value;
}

int64_t ArgReader::int_choice(const std::string& option, std::initializer_list<int64_t> accepted) {
  const std::string text = string_value(option);
  std::vector<std::string> names;
  for (int64_t value : accepted) names.push_back(std::to_string(value));
  if (std::find(names.begin(), names.end(), text) == names.end()) {
    throw CliError(option + ": expected " + join_choices(names) + ", got '" + text + "'");
  }
  return parse_int(option, text, INT64_MIN, INT64_MAX);
}

bool asks_for_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return true;
  }
  return false;
}

}  // namespace sparse_decode::cli
