// attnkit: train the lesson models, look at their attention, run lesson 000's demos.
// This file runs the subcommand the command line names (tools/cli_parser.cc parses it, CLI11)
// and maps errors to exit codes: 0 success, 1 runtime error (one "error: …" line on stderr),
// 2 usage error.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "engine/error.h"
#include "engine/hash.h"
#include "engine/executor.h"
#include "engine/simd_target.h"
#include "ops/gemm.h"
#include "ops/gemm_bf16.h"
#include "tools/cli_parser.h"
#include "tools/commands.h"
#include "tools/mpi_collective.h"
#include "tools/program_env.h"

namespace {

int usage_error(const std::string& message) {
  std::fprintf(stderr, "usage error: %s\nRun 'attnkit --help' (or 'attnkit SUBCOMMAND --help') for usage.\n",
               message.c_str());
  return 2;
}

#ifdef ATTNKIT_HAVE_MPI
// --version's MPI line: the library the MPI module was built with (loading it, and MPI).
std::string mpi_version() {
  try {
    return attnkit::load_mpi_module().library_version() + " (mpirun -np N attnkit train: data-parallel)";
  } catch (const std::exception& e) {
    return std::string("unavailable: ") + e.what();
  }
}
#endif

// `attnkit --version`: the version, the SIMD target the kernels run on and what else there is.
std::string version_text() {
  auto join = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : " ") + n;
    return out;
  };
  std::string choices;  // the AVX-512 kernel choices, a line each
  for (const attnkit::KernelChoice& choice : attnkit::avx512_kernel_choices())
    choices += std::string("\n") + choice.label + ": " + choice.in_use() +
               (attnkit::avx512_target_in_use() ? "" : " (unused: the target is not AVX-512)");
  return std::string("attnkit ") + ATTNKIT_VERSION + "\nSIMD target: " + attnkit::simd_target_name() +
         (std::getenv("ATTNKIT_SIMD_TARGET") ? " (ATTNKIT_SIMD_TARGET)" : "") + choices +
         "\nsupported by this CPU: " + join(attnkit::supported_simd_targets()) +
         "\ncompiled in: " + join(attnkit::compiled_simd_targets()) +
         "\nbf16 products (--precision bf16): " + attnkit::bf16_kernel_name(attnkit::bf16_kernel()) +
         (std::getenv("ATTNKIT_BF16") ? " (ATTNKIT_BF16)" : "") +
         (attnkit::avx512_allowed() ? "" : " (the target is not AVX-512)") +
         "; this CPU has: " + attnkit::bf16_kernels_available() +
         (attnkit::bf16_kernel_note().empty() ? "" : " (" + attnkit::bf16_kernel_note() + ")") +
#ifdef ATTNKIT_HAVE_MPI
         "\nMPI: " + mpi_version();
#else
         "\nMPI: none (built with ATTNKIT_MPI off)";
#endif
}

// A hash of the arguments after the program's name: the ranks of a job must be started alike.
uint64_t arguments_fingerprint(int argc, char** argv) {
  attnkit::Fnv1a h;
  for (int i = 1; i < argc; ++i) h.add(std::string(argv[i]));
  return h.h;
}

// Runs the parsed command; maps errors to exit codes (see the top of this file).
int run_command(const attnkit::cli::ParsedArgs& a, attnkit::Collective* group) {
  using namespace attnkit::cli;
  try {
    switch (a.command) {
      case Command::kTrain: return run_train(a.train, group);
      case Command::kEval: return run_eval(a.eval);
      case Command::kInfer: return run_infer(a.infer);
      case Command::kRollout: return run_rollout(a.rollout_in, a.rollout_out);
      case Command::kDemo: return run_demo(a.demo);
      case Command::kRender: return run_render(a.render);
      case Command::kNone: break;
    }
  } catch (const UsageError& e) {
    return usage_error(e.what());
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return usage_error("no subcommand");
}

#ifdef ATTNKIT_HAVE_MPI
// One process of an mpirun job. Errors every rank meets alike (a usage error, ranks that
// disagree, a numeric fault of the summed gradients) are told once, by rank 0, and every rank
// ends with the same code; an error of one rank alone (e.g. rank 0 cannot write the run folder)
// is told with its rank and ends the whole job (MPI_Abort), so no rank waits forever.
int run_in_group(const attnkit::cli::ParsedArgs& a, int argc, char** argv) {
  using namespace attnkit::cli;
  const attnkit::MpiModule* mpi = nullptr;
  std::unique_ptr<attnkit::Collective> group;
  try {
    mpi = &attnkit::load_mpi_module();
  } catch (const std::exception& e) {
    // A launcher of one process (mpirun -np 1, srun -n 1) needs no MPI: run alone.
    if (attnkit::launched_group_size() == 1) return run_command(a, nullptr);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  try {
    group.reset(mpi->start_group(&argc, &argv, stop_signal_flag()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  const int rank = group->rank(), size = group->size();
  const bool lead = rank == 0;
  try {
    if (a.command != Command::kTrain) {
      if (size == 1) return run_command(a, nullptr);  // (mpirun -np 1, or a PMI environment: one process)
      if (lead) usage_error("only 'attnkit train' runs across the processes of an mpirun job; run the others alone");
      return 2;
    }
    const std::vector<uint64_t> args = group->all_gather(arguments_fingerprint(argc, argv));
    for (int k = 1; k < size; ++k)
      if (args[static_cast<size_t>(k)] != args[0]) {
        if (lead)
          std::fprintf(stderr, "error: rank %d of %d was started with other arguments than rank 0; every rank of "
                               "an mpirun job must run the same command\n", k, size);
        return 1;
      }
    return run_train(a.train, group.get());
  } catch (const UsageError& e) {
    if (lead) usage_error(e.what());
    return 2;
  } catch (const attnkit::GroupError& e) {
    if (lead) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const attnkit::NumericError& e) {
    std::fflush(stdout);
    if (lead) std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "error: rank %d of %d: %s; ending the job\n", rank, size, e.what());
    std::fflush(stderr);
    mpi->abort(1);
    std::_Exit(1);  // (abort does not return)
  }
}
#endif

}  // namespace

int main(int argc, char** argv) {
  using namespace attnkit::cli;
  // A file grown past RLIMIT_FSIZE fails its write with EFBIG, reported like a full disk (the
  // file named, the earlier version kept), instead of SIGXFSZ killing the process mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    attnkit::apply_simd_target_env();
  } catch (const attnkit::Error& e) {
    return usage_error(e.what());
  }
  CommandLine command_line;
  command_line.app().set_version_flag("--version", version_text, "Print the version and the SIMD targets, then exit");
  try {
    command_line.parse(argc, argv);
  } catch (const CLI::CallForVersion& e) {
    return command_line.app().exit(e);
  } catch (const CLI::CallForHelp& e) {
    return command_line.app().exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return command_line.app().exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what());
  }

  const ParsedArgs& a = command_line.args();
  // (OMP_WAIT_POLICY, huge pages: see tools/program_env.h; render, rollout and demo are short.)
  if (a.command == Command::kTrain) attnkit::prefer_program_environment(a.train.threads, argv);
  if (a.command == Command::kEval) attnkit::prefer_program_environment(a.eval.threads, argv);
  if (a.command == Command::kInfer) attnkit::prefer_program_environment(a.infer.threads, argv);
#ifdef ATTNKIT_HAVE_MPI
  if (attnkit::launched_by_mpi()) return run_in_group(a, argc, argv);
#else
  if (attnkit::launched_group_size() > 1) {
    std::fprintf(stderr, "error: this attnkit was built without MPI (CMake option ATTNKIT_MPI): it cannot train "
                         "across the %d processes mpirun started\n", attnkit::launched_group_size());
    return 1;
  }
#endif
  return run_command(a, nullptr);
}
