// The chat template fixtures (tests/data/chat_templates/, made by
// scripts/reference/chat_templates.py): their paths, their text, the conversations and what
// transformers rendered of them, and the clock they were rendered at.
#pragma once

#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace hoist::runtime::testing {

inline std::string ChatFixturePath(const std::string& name) {
  return std::string(HOIST_SOURCE_DIR) + "/tests/data/chat_templates/" + name;
}

inline std::string ReadChatFixture(const std::string& name) {
  std::ifstream in(ChatFixturePath(name), std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// expected.json: "conversations" and, per family and conversation, what transformers rendered.
inline const nlohmann::ordered_json& ChatExpected() {
  static const nlohmann::ordered_json expected =
      nlohmann::ordered_json::parse(ReadChatFixture("expected.json"));
  return expected;
}

// The local time the fixtures were rendered at (strftime_now).
inline std::tm ChatFixtureNow() {
  std::tm now{};
  now.tm_year = 2024 - 1900;
  now.tm_mon = 8;
  now.tm_mday = 26;
  now.tm_hour = 10;
  now.tm_min = 30;
  now.tm_wday = 4;
  now.tm_yday = 269;
  return now;
}

}  // namespace hoist::runtime::testing
