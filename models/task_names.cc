#include "models/task_names.h"

namespace attnkit {

const std::vector<std::string>& known_tasks() {
  static const std::vector<std::string> tasks = {"neighbor-sum", "duplicates", "reversal",
                                                 "induction", "reversal-large"};
  return tasks;
}

}  // namespace attnkit
