// Errors the library reports to its caller. Messages name what was wrong (file, tensor,
// shape, op); the command line prints them as one `error: …` line.
#pragma once
#include <stdexcept>
#include <string>

namespace attnkit {

// Any error attnkit reports: bad input, a file that cannot be read or written, a shape that
// does not fit. Library code throws this (or a subclass), never aborts on user input.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A shape or graph-construction error, found while the graph is built.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A file that is missing, unreadable, malformed or cannot be written.
class FileError : public Error {
 public:
  using Error::Error;
};

// NaN or Inf in the loss, a gradient or a parameter during training. The message names the
// step and the tensor; the trainer refuses to save afterwards, so the last good checkpoint
// on disk stays as it was.
class NumericError : public Error {
 public:
  using Error::Error;
};

// What a graph's executor needs (arena, parameters, gradients, inputs) is more memory than the
// machine has: refused before anything is allocated, rather than left to the OOM killer.
class MemoryError : public Error {
 public:
  using Error::Error;
};

// The processes of a data-parallel group disagree (model, options, data or starting state).
// Every process finds it alike, so every one throws it: a program reports it once.
class GroupError : public Error {
 public:
  using Error::Error;
};

}  // namespace attnkit
