// Names of the tasks lesson_config knows, in a file of their own so that code which only needs
// the names (the command-line parser and its fuzz target) links without the engine.
#pragma once
#include <string>
#include <vector>

namespace attnkit {

// Tasks lesson_config knows.
const std::vector<std::string>& known_tasks();

}  // namespace attnkit
