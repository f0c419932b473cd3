// stepcast-exec: runs a Program (stepcast lower) on GPUs and writes the measured timeline as
// a stepcast.result/1 document for `stepcast validate PREDICTED.json MEASURED.json`
// (docs/calibration.md step 3; calibrate/README.md).
// Exit codes: 0 success, 1 a CUDA/NCCL failure or no GPU, 2 a bad Program (or one that
// cannot run on these GPUs), 3 the plan does not fit in GPU memory.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "host_backend.h"
#include "measured.h"
#include "plan.h"
#include "program.h"

#ifdef STEPCAST_EXEC_GPU
#include "bench_error.h"
#include "gpu_runner.h"
#endif

namespace {

// One line to stderr in one write: the processes of an MPI run share the launcher's stderr,
// and std::cerr's unbuffered `<<` pieces from two processes interleave mid-line.
void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stderr);
  std::fflush(stderr);
}

constexpr const char* kUsage =
    "usage: stepcast-exec PROGRAM.json [-o MEASURED.json] [options]\n"
    "  -o FILE       write the measured result (stepcast.result/1) here (default: stdout)\n"
    "  --dry-run     parse, check and plan only; print what would run (no GPU needed)\n"
    "  --gpus N      with --dry-run: GPUs to place the ranks on (default: world_size)\n"
    "  --host        run the Program's simulated ranks on CPU threads against a virtual\n"
    "                clock (no GPU): the GPU layer's issue loop and rendezvous, each task\n"
    "                --task-ns long (default 1000); proves the Program cannot deadlock\n"
    "  --task-ns N   with --host: virtual nanoseconds per task (alloc/free take none)\n"
    "  --warmup N    untimed runs of the whole Program before the timed one (default 1)\n"
    "  --timeline    also write every task's [start_s, end_s] per rank\n"
    "  --graph       capture each GPU's Program into a CUDA graph once and replay it (no\n"
    "                host work between tasks; one process only)\n"
    "  --untimed     with --graph: also replay the Program captured with no event around\n"
    "                its tasks and write that step as step_time_untimed_s (each event\n"
    "                holds its stream ~1.3 us on an H200)\n"
    "  --attention fused|unfused\n"
    "                attention through cuDNN's fused SDPA where cuDNN runs the shape (the\n"
    "                default; the others unfused, as the provenance says), or all unfused\n"
    "One process drives all local GPUs (one per rank); built with -DSTEPCAST_BENCH_MPI=ON\n"
    "and started with mpirun -np WORLD_SIZE, one process per GPU across nodes.\n";

struct Args {
  std::string program, out;
  bool dry_run = false, timeline = false, host = false, graph = false, untimed = false;
  bool fused_attention = true, attention_given = false;
  int gpus = -1, warmup = 1, task_ns = 1000;
};

int to_int(const std::string& flag, const std::string& v, int min) {
  try {
    size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size() && n >= min) return n;
  } catch (const std::exception&) {}
  throw stepcast::exec::ProgramError(flag + ": expected an integer >= " + std::to_string(min) +
                                     ", got \"" + v + "\"");
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw stepcast::exec::ProgramError(s + ": needs a value\n" + kUsage);
      return argv[++i];
    };
    if (s == "-h" || s == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else if (s == "-o" || s == "--output") {
      a.out = next();
    } else if (s == "--dry-run") {
      a.dry_run = true;
    } else if (s == "--host") {
      a.host = true;
    } else if (s == "--task-ns") {
      a.task_ns = to_int(s, next(), 0);
    } else if (s == "--timeline") {
      a.timeline = true;
    } else if (s == "--graph") {
      a.graph = true;
    } else if (s == "--untimed") {
      a.untimed = true;
    } else if (s == "--attention") {
      const std::string v = next();
      if (v != "fused" && v != "unfused")
        throw stepcast::exec::ProgramError("--attention: expected fused or unfused, got \"" + v +
                                           "\"");
      a.fused_attention = v == "fused";
      a.attention_given = true;
    } else if (s == "--gpus") {
      a.gpus = to_int(s, next(), 1);
    } else if (s == "--warmup") {
      a.warmup = to_int(s, next(), 0);
    } else if (!s.empty() && s[0] == '-') {
      throw stepcast::exec::ProgramError("unknown option \"" + s + "\"\n" + kUsage);
    } else if (a.program.empty()) {
      a.program = s;
    } else {
      throw stepcast::exec::ProgramError("one Program only (got \"" + a.program + "\" and \"" + s +
                                         "\")\n" + kUsage);
    }
  }
  if (a.program.empty())
    throw stepcast::exec::ProgramError(std::string("no Program given\n") + kUsage);
  if (a.gpus > 0 && !a.dry_run)
    throw stepcast::exec::ProgramError("--gpus applies to --dry-run only");
  if (a.host && a.dry_run)
    throw stepcast::exec::ProgramError("--host and --dry-run exclude each other");
  if (a.graph && (a.host || a.dry_run))
    throw stepcast::exec::ProgramError(
        "--graph applies to a run on GPUs (not --host or --dry-run)");
  if (a.attention_given && (a.host || a.dry_run))
    throw stepcast::exec::ProgramError(
        "--attention applies to a run on GPUs (not --host or --dry-run)");
  if (a.untimed && !a.graph)
    throw stepcast::exec::ProgramError(
        "--untimed needs --graph (the untimed step is a replay of the Program captured "
        "without its timing events)");
  return a;
}

// --host: the CPU backend (host_backend.h) on the simulated ranks, as the engine runs them.
int run_host(const Args& args, const stepcast::exec::Program& program) {
  using namespace stepcast::exec;
  const Plan plan = make_plan(program, PlanMode::kSimulated);
  const HostRun run = run_on_host(plan, uniform_durations(plan, args.task_ns));
  const Recorded rec = to_recorded(run);
  const std::map<std::string, std::string> provenance = {
      {"backend", "host (virtual clock, " + std::to_string(args.task_ns) + " ns per task)"}};
  if (!args.out.empty()) {
    std::ofstream f(args.out);
    if (!f) throw ProgramError(args.out + ": cannot write");
    write_measured(plan, rec, provenance, args.timeline, f);
    if (!f) throw ProgramError(args.out + ": write failed");
  }
  std::size_t tasks = 0;
  for (const ExecRank& er : plan.ranks) tasks += plan.tasks_of(er.rank).size();
  const MeasuredSummary s = summarize(plan, rec);
  std::cout << "stepcast-exec --host: " << program.file << ": " << tasks << " tasks on "
            << plan.ranks.size() << " thread(s) (one per simulated rank), "
            << plan.rendezvous.size() << " rendezvous, no deadlock; virtual step "
            << s.step_time_s * 1e3 << " ms" << (args.out.empty() ? "" : "; wrote " + args.out)
            << "\n";
  return 0;
}

int run(int argc, char** argv) {
  using namespace stepcast::exec;
  const Args args = parse_args(argc, argv);
  const Program program = load_program(args.program);
  if (args.host) return run_host(args, program);
  Plan plan = make_plan(program);
  if (args.dry_run) {
    place_single_process(plan, args.gpus > 0 ? args.gpus : program.world_size);
#ifdef STEPCAST_EXEC_WITH_MPI
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me != 0) return 0;  // under mpirun: one description, from process 0
#endif
    std::cout << describe(plan);
    return 0;
  }
#ifndef STEPCAST_EXEC_GPU
  say("stepcast-exec: built without CUDA (no toolkit found, or STEPCAST_CUDA=OFF): only "
      "--dry-run works");
  return 1;
#else
  GpuOptions opt;
  opt.warmup = args.warmup;
  opt.graph = args.graph;
  opt.untimed = args.untimed;
  opt.fused_attention = args.fused_attention;
  int process = 0;
#ifdef STEPCAST_EXEC_WITH_MPI
  int processes = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &processes);
  MPI_Comm_rank(MPI_COMM_WORLD, &process);
  if (processes > 1) {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, process, MPI_INFO_NULL, &node);
    int local = 0, local_size = 1;
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);
    const int gpus = visible_gpus();
    if (gpus == 0) {
      say("stepcast-exec: process " + std::to_string(process) + ": no GPU visible");
      return 1;
    }
    // Rank r on node r / gpus_per_node, GPU r % gpus_per_node, as the Program's groups assume.
    place_one_per_process(plan, processes, process, local, local_size, gpus);
    opt.mpi = MPI_COMM_WORLD;
  }
  if (processes <= 1)
#endif
  {
    const int gpus = visible_gpus();
    if (gpus == 0) {
      say("stepcast-exec: no GPU visible (use --dry-run to check the Program without one)");
      return 1;
    }
    place_single_process(plan, gpus);
  }
  std::map<std::string, std::string> provenance;
  const Recorded rec = run_on_gpus(plan, opt, provenance);
  if (process != 0) return 0;
  if (args.out.empty()) {
    write_measured(plan, rec, provenance, args.timeline, std::cout);
  } else {
    std::ofstream f(args.out);
    if (!f) throw ProgramError(args.out + ": cannot write");
    write_measured(plan, rec, provenance, args.timeline, f);
    if (!f) throw ProgramError(args.out + ": write failed");
    const MeasuredSummary s = summarize(plan, rec);
    std::cout << "stepcast-exec: measured step " << s.step_time_s * 1e3 << " ms";
    if (rec.untimed_step_s >= 0)
      std::cout << " (" << rec.untimed_step_s * 1e3 << " ms without the task events)";
    std::cout << " on " << program.world_size << " GPU(s); wrote " << args.out << "\n";
  }
  return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
#ifdef STEPCAST_EXEC_WITH_MPI
  MPI_Init(&argc, &argv);
  auto finish = [](int rc) {
    if (rc != 0) {
      int n = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &n);
      if (n > 1) MPI_Abort(MPI_COMM_WORLD, rc);
    }
    MPI_Finalize();
    return rc;
  };
#else
  auto finish = [](int rc) { return rc; };
#endif
  try {
    return finish(run(argc, argv));
  } catch (const stepcast::exec::ProgramError& e) {
    say(std::string("stepcast-exec: ") + e.what());
    return finish(2);
#ifdef STEPCAST_EXEC_GPU
  } catch (const stepcast::exec::OutOfMemory& e) {
    say(std::string("stepcast-exec: ") + e.what());
    return finish(3);
#endif
  } catch (const std::exception& e) {
    say(std::string("stepcast-exec: ") + e.what());
    return finish(1);
  }
}
