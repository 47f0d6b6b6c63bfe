// deltainfer bench ab: one workload through two configurations (two GDN prefill backends, two
// precisions, or two builds), interleaved A, B, B, A over rounds after a warm-up, each run a fresh
// `bench-offline` process of the configuration's binary. Reports every sample, the median and
// spread, and B/A with a confidence interval, under the provenance of both configurations: the
// commit (a dirty tree refused, or recorded with --allow-dirty), each binary's embedded commit
// checked against its checkout, the GPU and its clocks before and after, and the hashes of every
// kernel artifact loaded. Profiler runs (--ncu) are separate processes that no figure includes.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/ab_stats.h"
#include "core/error.h"
#include "core/sha256.h"

extern char** environ;

namespace di::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One side of the comparison, from "key=value,key=value".
struct AbConfig {
  std::string name;
  std::string binary;               // a deltainfer binary (default: this one)
  std::string source = ".";         // the checkout it was built from
  std::string gdn_prefill_backend;  // --gdn-prefill-backend
  std::string gdn_artifacts;        // --gdn-artifacts
  std::string device = "auto";
  std::string precision = "bf16";
  // env=NAME=VALUE (repeatable): set for this configuration's runs only, e.g. DI_EARLY_LAUNCH=0.
  std::map<std::string, std::string> env;
};

bool is_env_name(const std::string& n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  return std::all_of(n.begin(), n.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; });
}

AbConfig parse_config(const std::string& spec, const char* which, const std::string& self) {
  AbConfig c;
  c.name = which;
  c.binary = self;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail("--{} {}: '{}' is not key=value", which, spec, item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "name") c.name = value;
    else if (key == "binary") c.binary = value;
    else if (key == "source") c.source = value;
    else if (key == "gdn-prefill-backend") c.gdn_prefill_backend = value;
    else if (key == "gdn-artifacts") c.gdn_artifacts = value;
    else if (key == "device") c.device = value;
    else if (key == "precision") c.precision = value;
    else if (key == "env") {
      const size_t at = value.find('=');
      const std::string name = value.substr(0, at);
      if (at == std::string::npos || !is_env_name(name))
        fail("--{}: env={} is not env=NAME=VALUE with NAME of letters, digits and _", which, value);
      if (!c.env.emplace(name, value.substr(at + 1)).second) fail("--{}: env={} is set twice", which, name);
    } else
      fail("--{}: unknown key '{}' (name, binary, source, gdn-prefill-backend, gdn-artifacts, device, precision, env)",
           which, key);
  }
  return c;
}

struct Scenario {
  std::string name;  // prefill-2048x1, serve-1024-256x16
  int64_t input = 0, output = 1, concurrency = 1, requests = 4;
};

// "prefill-LxC" (L tokens in, 1 out, C at once) and "serve-I-OxC"; 4 requests at concurrency 1,
// else twice the concurrency (bench-offline's own default warm-up comes first in each run).
Scenario parse_scenario(const std::string& s) {
  Scenario sc;
  sc.name = s;
  long long a = 0, b = 0, c = 0;
  char tail = 0;
  if (std::sscanf(s.c_str(), "prefill-%lldx%lld%c", &a, &c, &tail) == 2) {
    sc.input = a, sc.output = 1, sc.concurrency = c;
  } else if (std::sscanf(s.c_str(), "serve-%lld-%lldx%lld%c", &a, &b, &c, &tail) == 3) {
    sc.input = a, sc.output = b, sc.concurrency = c;
  } else {
    fail("--scenarios: '{}' is neither prefill-LENxCONC nor serve-IN-OUTxCONC", s);
  }
  if (sc.input < 1 || sc.output < 1 || sc.concurrency < 1) fail("--scenarios: '{}' needs positive numbers", s);
  sc.requests = sc.concurrency == 1 ? 4 : 2 * sc.concurrency;
  return sc;
}

// This process's environment with `overrides` set (replacing any of the same name).
std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!overrides.contains(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

// Runs argv with stdout and stderr into `log` (appended), with `env` set on top of this process's
// environment; the exit status.
int run_logged(const std::vector<std::string>& argv, const fs::path& log,
               const std::map<std::string, std::string>& env = {}) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::vector<std::string> environment = environment_with(env);
  std::vector<char*> envp;
  for (const std::string& e : environment) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs argv and returns its stdout (stderr discarded); `ok` false when it could not run or failed.
std::string capture(const std::vector<std::string>& argv, bool* ok = nullptr) {
  char name[] = "/tmp/deltainfer-ab-XXXXXX";
  const int fd = mkstemp(name);
  if (fd < 0) fail("bench ab: cannot make a temporary file");
  close(fd);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, name, O_WRONLY | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0644);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int status = -1;
  if (posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ) == 0) waitpid(pid, &status, 0);
  posix_spawn_file_actions_destroy(&actions);
  std::ifstream in(name, std::ios::binary);
  std::string out((std::istreambuf_iterator<char>(in)), {});
  fs::remove(name);
  if (ok != nullptr) *ok = status == 0;
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// Every kernel artifact the configuration loads, checked against the binary's pins (its file hashes
// go into the report).
void add_artifacts(const AbConfig& c, json& p) {
  if (c.gdn_artifacts.empty()) return;
  bool ok = false;
  const std::string verified = capture({c.binary, "artifacts", "verify", c.gdn_artifacts}, &ok);
  if (!ok) fail("bench ab: config {}: the bundle {} fails '{} artifacts verify'", c.name, c.gdn_artifacts, c.binary);
  p["artifacts"] = verified;
}

// The configuration's provenance; refuses a binary built from another commit than its checkout's
// HEAD, and a dirty checkout unless allowed (then the changed files and a hash of the diff).
json provenance_of(const AbConfig& c, bool allow_dirty) {
  std::error_code ec;
  if (!fs::is_regular_file(c.binary, ec)) fail("bench ab: config {}: binary={} is not a file", c.name, c.binary);
  bool ok = false;
  const std::string version = capture({c.binary, "version", "--json"}, &ok);
  if (!ok) fail("bench ab: config {}: '{} version --json' failed: is binary= a deltainfer binary?", c.name, c.binary);
  const json build = json::parse(version);
  const std::string commit = build.value("commit", "unknown");
  // A tree copied without its history (the GPU machine's) has its commit and state declared by
  // whoever sent it, as the build does (DI_SOURCE_COMMIT, DI_SOURCE_DIRTY).
  if (const char* declared = std::getenv("DI_SOURCE_COMMIT"); declared != nullptr && *declared != '\0') {
    const bool dirty = std::string(std::getenv("DI_SOURCE_DIRTY") ? std::getenv("DI_SOURCE_DIRTY") : "") != "false";
    if (commit != declared)
      fail("bench ab: config {}: the binary {} was built from commit {}, but DI_SOURCE_COMMIT declares {}", c.name,
           c.binary, commit, declared);
    if (dirty && !allow_dirty)
      fail("bench ab: config {}: DI_SOURCE_DIRTY does not say false: commit the tree, or pass --allow-dirty", c.name);
    json p = {{"config", c.name}, {"binary", fs::path(c.binary).filename().string()},
              {"binary_sha256", sha256_file(c.binary)}, {"build", build}, {"commit", commit}, {"dirty", dirty},
              {"commit_from", "DI_SOURCE_COMMIT (a tree sent without its history)"}};
    if (dirty) p["diff_sha256"] = "unavailable: the tree came without its history";
    add_artifacts(c, p);
    return p;
  }
  const std::string head = trim(capture({"git", "-C", c.source, "rev-parse", "HEAD"}, &ok));
  if (!ok) fail("bench ab: config {}: {} is not a git checkout (source= names the tree the binary was built from)",
                c.name, c.source);
  if (commit != head)
    fail("bench ab: config {}: the binary {} was built from commit {}, but its checkout {} is at {}; rebuild it, or "
         "name the right checkout with source=",
         c.name, c.binary, commit, c.source, head);
  const std::string status = capture({"git", "-C", c.source, "status", "--porcelain"});
  json p = {{"config", c.name}, {"binary", fs::path(c.binary).filename().string()},
            {"binary_sha256", sha256_file(c.binary)}, {"build", build},
            {"commit", head}, {"dirty", !status.empty() || build.value("dirty", false)}};
  if (p["dirty"].get<bool>()) {
    std::vector<std::string> files;
    std::stringstream lines(status);
    for (std::string line; std::getline(lines, line);)
      if (line.size() > 3) files.push_back(line.substr(3));
    if (!allow_dirty)
      fail("bench ab: config {}: the checkout {} has {} changed file(s) ({}{}): commit them, or pass --allow-dirty to "
           "record the changed files and a hash of the diff",
           c.name, c.source, files.size(), files.empty() ? "the binary says dirty" : files.front(),
           files.size() > 1 ? ", ..." : "");
    // Tracked changes as one diff, untracked files by content: every source of the build counts.
    std::string material = capture({"git", "-C", c.source, "diff", "HEAD", "--binary"});
    const std::string untracked = capture({"git", "-C", c.source, "ls-files", "--others", "--exclude-standard"});
    std::stringstream names(untracked);
    for (std::string f; std::getline(names, f);) {
      std::error_code ec;
      if (fs::is_regular_file(fs::path(c.source) / f, ec)) material += f + "\n" + sha256_file(fs::path(c.source) / f) + "\n";
    }
    p["changed_files"] = files;
    p["diff_sha256"] = sha256_hex(material.data(), material.size());
  }
  add_artifacts(c, p);
  return p;
}

json gpu_state() {
  bool ok = false;
  const std::string smi = capture({"nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu",
                                   "--format=csv,noheader"}, &ok);
  return ok ? json(trim(smi)) : json("no nvidia-smi (no GPU visible)");
}

struct AbOptions {
  std::string a_spec, b_spec, model, out = "ab-report", scenarios = "prefill-128x8,prefill-2048x1,prefill-8192x1,"
                                                                      "prefill-32768x1,serve-1024-256x16";
  int rounds = 3;
  bool allow_dirty = false, ncu = false;
};

std::vector<std::string> bench_args(const AbConfig& c, const std::string& model, const Scenario& s,
                                    const fs::path& json_out) {
  std::vector<std::string> a = {c.binary, "bench-offline", "--model", model, "--device", c.device,
                                "--precision", c.precision, "--input-len", std::to_string(s.input),
                                "--output-len", std::to_string(s.output), "--concurrency",
                                std::to_string(s.concurrency), "--num-requests", std::to_string(s.requests),
                                "--max-num-seqs", std::to_string(std::max<int64_t>(s.concurrency, 1)),
                                "--max-num-batched-tokens", std::to_string(std::max<int64_t>(2048, s.input)),
                                "--json", json_out.string()};
  if (!c.gdn_prefill_backend.empty()) a.insert(a.end(), {"--gdn-prefill-backend", c.gdn_prefill_backend});
  if (!c.gdn_artifacts.empty()) a.insert(a.end(), {"--gdn-artifacts", c.gdn_artifacts});
  return a;
}

// The figures of one run: higher is better for the throughputs, lower for the latencies.
json sample_of(const json& r) {
  return {{"total_tokens_per_s", r["total_tokens_per_s"]},
          {"output_tokens_per_s", r["output_tokens_per_s"]},
          {"ttft_p50_ms", 1e3 * r["ttft_s"]["p50"].get<double>()},
          {"tpot_p50_ms", 1e3 * r["tpot_s"]["p50"].get<double>()},
          {"gdn_scratch_bytes", r.contains("memory") ? r["memory"]["gdn_scratch_bytes"] : json(-1)},
          {"device_used_bytes", r.contains("memory") ? r["memory"]["device_used_bytes"] : json(-1)}};
}

void run_ab(const AbOptions& o, const std::string& self) {
  if (o.rounds < 1) fail("--rounds must be >= 1, got {}", o.rounds);
  const AbConfig a = parse_config(o.a_spec, "a", self), b = parse_config(o.b_spec, "b", self);
  if (a.name == b.name) fail("bench ab: both configurations are named '{}': give them name=", a.name);
  std::vector<Scenario> scenarios;
  std::stringstream list(o.scenarios);
  for (std::string s; std::getline(list, s, ',');)
    if (!s.empty()) scenarios.push_back(parse_scenario(s));
  if (scenarios.empty()) fail("--scenarios names none");

  json report = {{"provenance", {{"a", provenance_of(a, o.allow_dirty)}, {"b", provenance_of(b, o.allow_dirty)},
                                 {"gpu_before", gpu_state()}}},
                 {"model", fs::path(o.model).filename().string()},
                 {"rounds", o.rounds},
                 {"order", "per round and scenario: A, B, B, A; one untimed A, B warm-up first"},
                 {"configs", {{"a", {{"name", a.name}, {"gdn_prefill_backend", a.gdn_prefill_backend},
                                     {"device", a.device}, {"precision", a.precision}, {"env", a.env}}},
                              {"b", {{"name", b.name}, {"gdn_prefill_backend", b.gdn_prefill_backend},
                                     {"device", b.device}, {"precision", b.precision}, {"env", b.env}}}}},
                 {"scenarios", json::array()}};
  const fs::path out(o.out), runs = out / "runs";
  fs::create_directories(runs);
  const fs::path log = out / "runs.log";
  int counter = 0;
  auto one_run = [&](const AbConfig& c, const Scenario& s, const std::string& tag) {
    const fs::path file = runs / fmt::format("{:03d}-{}-{}-{}.json", ++counter, s.name, c.name, tag);
    std::ofstream(log, std::ios::app) << "== " << file.filename().string() << "\n";
    const int status = run_logged(bench_args(c, o.model, s, file), log, c.env);
    if (status != 0) fail("bench ab: {} run of {} on {} failed (exit {}); see {}", tag, c.name, s.name, status, log.string());
    std::ifstream in(file);
    return json::parse(in);
  };
  for (const Scenario& s : scenarios) {
    std::fprintf(stderr, "bench ab: %s: warm-up\n", s.name.c_str());
    one_run(a, s, "warmup");
    one_run(b, s, "warmup");
    json sc = {{"name", s.name}, {"input_len", s.input}, {"output_len", s.output}, {"concurrency", s.concurrency},
               {"requests", s.requests}, {"runs", json::array()}};
    for (int r = 0; r < o.rounds; ++r) {
      std::fprintf(stderr, "bench ab: %s: round %d of %d\n", s.name.c_str(), r + 1, o.rounds);
      for (const AbConfig* c : {&a, &b, &b, &a}) {
        const json result = one_run(*c, s, fmt::format("round{}", r + 1));
        sc["runs"].push_back({{"round", r + 1}, {"config", c == &a ? "a" : "b"}, {"sample", sample_of(result)},
                              {"build_commit", result["build"]["commit"]}});
      }
    }
    // B against A per metric, round by round.
    json cmp = json::object();
    for (const char* metric : {"total_tokens_per_s", "output_tokens_per_s", "ttft_p50_ms", "tpot_p50_ms"}) {
      if (std::string(metric) == "tpot_p50_ms" && s.output < 2) continue;
      std::vector<std::vector<double>> ar(size_t(o.rounds)), br(size_t(o.rounds));
      for (const json& run : sc["runs"])
        (run["config"] == "a" ? ar : br)[size_t(run["round"].get<int>() - 1)].push_back(run["sample"][metric].get<double>());
      const AbComparison c = compare_ab(ar, br);
      cmp[metric] = {{"a_median", c.a.median}, {"a_min", c.a.min}, {"a_max", c.a.max}, {"b_median", c.b.median},
                     {"b_min", c.b.min}, {"b_max", c.b.max}, {"ratio_b_over_a", c.ratio}, {"ci95", {c.ratio_low, c.ratio_high}},
                     {"measurable", c.measurable}, {"verdict", c.verdict}};
    }
    for (const char* metric : {"gdn_scratch_bytes", "device_used_bytes"}) {
      int64_t ma = -1, mb = -1;
      for (const json& run : sc["runs"]) (run["config"] == "a" ? ma : mb) = std::max(run["config"] == "a" ? ma : mb, run["sample"][metric].get<int64_t>());
      cmp[metric] = {{"a_max", ma}, {"b_max", mb}};
    }
    sc["comparison"] = cmp;
    report["scenarios"].push_back(sc);
  }
  report["provenance"]["gpu_after"] = gpu_state();

  // Profiler runs, apart from every timed figure above.
  if (o.ncu) {
    json profiles = json::array();
    for (const Scenario& s : scenarios)
      for (const AbConfig* c : {&a, &b}) {
        const fs::path rep = out / "profiles" / fmt::format("{}-{}", c->name, s.name);
        fs::create_directories(rep.parent_path());
        std::vector<std::string> argv = {"ncu", "--target-processes", "all", "-f", "-o", rep.string()};
        Scenario one = s;
        one.requests = s.concurrency;
        for (const std::string& x : bench_args(*c, o.model, one, out / "profiles" / "discarded.json")) argv.push_back(x);
        const int status = run_logged(argv, out / "profiles.log", c->env);
        profiles.push_back({{"config", c->name}, {"scenario", s.name}, {"report", rep.filename().string() + ".ncu-rep"},
                            {"exit", status}});
      }
    report["profiles"] = {{"note", "ncu runs: separate processes, in no figure of this report"}, {"runs", profiles}};
  }

  std::ofstream(out / "report.json") << report.dump(1) << "\n";

  // Markdown summary.
  std::string md = fmt::format("# A/B: {} (A) against {} (B)\n\n", a.name, b.name);
  for (const char* side : {"a", "b"}) {
    const json& p = report["provenance"][side];
    md += fmt::format("- **{}**: commit {}{}, binary {} (nvcc {}, {}){}{}\n", p["config"].get<std::string>(),
                      p["commit"].get<std::string>(), p["dirty"].get<bool>() ? " (dirty, diff " + p.value("diff_sha256", std::string("?")).substr(0, 16) + ")" : "",
                      p["binary"].get<std::string>(),
                      p["build"].value("nvcc", "").empty() ? std::string("none") : p["build"].value("nvcc", ""),
                      p["build"].value("cxx", "?"),
                      report["configs"][side]["gdn_prefill_backend"].get<std::string>().empty()
                          ? ""
                          : ", GDN prefill " + report["configs"][side]["gdn_prefill_backend"].get<std::string>(),
                      p.contains("artifacts") ? ", artifacts verified against the pins" : "");
    for (const auto& [name, value] : report["configs"][side]["env"].items())
      md += fmt::format("  - environment: {}={}\n", name, value.get<std::string>());
  }
  md += fmt::format("- GPU before: {}\n- GPU after: {}\n- model {}, {} round(s) of A, B, B, A per scenario after one "
                    "untimed A, B\n\n",
                    report["provenance"]["gpu_before"].get<std::string>(), report["provenance"]["gpu_after"].get<std::string>(),
                    report["model"].get<std::string>(), o.rounds);
  md += "| scenario | metric | A median (min-max) | B median (min-max) | B/A (95% interval) | verdict |\n|---|---|---|---|---|---|\n";
  for (const json& sc : report["scenarios"])
    for (const auto& [metric, c] : sc["comparison"].items()) {
      if (!c.contains("verdict")) continue;
      md += fmt::format("| {} | {} | {:.4g} ({:.4g}-{:.4g}) | {:.4g} ({:.4g}-{:.4g}) | {:.3f} ({:.3f}-{:.3f}) | {} |\n",
                        sc["name"].get<std::string>(), metric, c["a_median"].get<double>(), c["a_min"].get<double>(),
                        c["a_max"].get<double>(), c["b_median"].get<double>(), c["b_min"].get<double>(),
                        c["b_max"].get<double>(), c["ratio_b_over_a"].get<double>(), c["ci95"][0].get<double>(),
                        c["ci95"][1].get<double>(), c["verdict"].get<std::string>());
    }
  md += "\n| scenario | GDN scratch bytes A / B (max) | device memory in use A / B (max) |\n|---|---|---|\n";
  for (const json& sc : report["scenarios"])
    md += fmt::format("| {} | {} / {} | {} / {} |\n", sc["name"].get<std::string>(),
                      sc["comparison"]["gdn_scratch_bytes"]["a_max"].get<int64_t>(),
                      sc["comparison"]["gdn_scratch_bytes"]["b_max"].get<int64_t>(),
                      sc["comparison"]["device_used_bytes"]["a_max"].get<int64_t>(),
                      sc["comparison"]["device_used_bytes"]["b_max"].get<int64_t>());

  // The per-round plot, drawn by tools/bench/plot_ab.py from A's checkout when matplotlib is there.
  const fs::path plotter = fs::path(a.source) / "tools" / "bench" / "plot_ab.py";
  bool plotted = false;
  if (fs::exists(plotter))
    plotted = run_logged({"python3", plotter.string(), (out / "report.json").string(), (out / "report.png").string()},
                         out / "plot.log") == 0;
  md += plotted ? "\n![per-round samples](report.png)\n"
                : fmt::format("\nNo plot: {} (see plot.log)\n", fs::exists(plotter) ? "plot_ab.py failed" : "no plot_ab.py");
  std::ofstream(out / "report.md") << md;
  std::printf("%s", md.c_str());
}

}  // namespace

Command add_bench_ab(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "comparisons on the production path");
  bench->require_subcommand(1);
  auto* cmd = bench->add_subcommand(
      "ab", "one workload through two configurations, interleaved A, B, B, A, with provenance and intervals");
  auto o = std::make_shared<AbOptions>();
  cmd->add_option("--a", o->a_spec,
                  "configuration A: key=value,... of name, binary, source, gdn-prefill-backend, gdn-artifacts, "
                  "device, precision, env (env=NAME=VALUE, repeatable)")
      ->required();
  cmd->add_option("--b", o->b_spec, "configuration B (the same keys)")->required();
  cmd->add_option("--model", o->model, "model directory")->required();
  cmd->add_option("--scenarios", o->scenarios, "comma-separated prefill-LENxCONC and serve-IN-OUTxCONC")
      ->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "rounds of A, B, B, A per scenario")->capture_default_str();
  cmd->add_option("--out", o->out, "report directory (report.json, report.md, report.png, runs/)")->capture_default_str();
  cmd->add_flag("--allow-dirty", o->allow_dirty, "run from a dirty checkout, recording its changed files and diff hash");
  cmd->add_flag("--ncu", o->ncu, "after the timed runs, profile one run of each scenario and config with ncu");
  return Command{cmd, [o] {
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    run_ab(*o, ec ? std::string("deltainfer") : self.string());
  }};
}

}  // namespace di::cli
