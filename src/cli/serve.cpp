// deltainfer serve: the OpenAI-compatible HTTP server (server/http_server.h) on the engine. The
// socket is bound first and answers 503 while the model loads; "listening on ..." is printed once
// requests are served. SIGTERM or SIGINT drains: new requests get 503, in-flight ones get
// --shutdown-timeout seconds, then the rest are cancelled and the process exits 0.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "engine/engine_host.h"
#if DI_HAVE_HTTP
#include "server/http_server.h"
#endif

namespace di::cli {
namespace {

struct ServeOptions {
  EngineCliOptions engine;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  int64_t max_queued = 1024;
  size_t max_body_bytes = size_t(16) << 20;
  int http_threads = 512;
  double shutdown_timeout = 30;
  std::string reasoning_parser;
};

void run_serve(const ServeOptions& o) {
#if DI_HAVE_HTTP
  // The signals are taken by sigwait below, never by a handler: block them before any thread starts
  // (threads inherit the mask).
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  server::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = o.api_key;
  std::filesystem::path dir = std::filesystem::absolute(o.engine.model.model_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "model/"
  so.model_name = o.served_model_name.empty() ? dir.filename().string() : o.served_model_name;
  so.max_body_bytes = o.max_body_bytes;
  so.http_threads = o.http_threads;
  so.shutdown_timeout_s = o.shutdown_timeout;
  so.reasoning_parser = o.reasoning_parser;
  server::HttpServer server(so);
  const int port = server.bind();
  std::thread listener([&] { server.serve(); });

  std::unique_ptr<EngineHost> host;
  try {
    EngineHostOptions h = o.engine.host_options();
    h.max_waiting = o.max_queued;
    host = std::make_unique<EngineHost>(h);
    server.set_host(*host);
  } catch (...) {
    server.shutdown();
    listener.join();
    throw;
  }
  std::printf("deltainfer serve: listening on http://%s:%d (model '%s')\n", o.host.c_str(), port, so.model_name.c_str());
  std::fflush(stdout);

  int signal = 0;
  sigwait(&signals, &signal);
  std::fprintf(stderr, "deltainfer serve: %s, draining (up to %.0f s)\n", signal == SIGTERM ? "SIGTERM" : "SIGINT",
               o.shutdown_timeout);
  server.shutdown();
  listener.join();
#else
  (void)o;
  fail("serve: this build has no HTTP server (cpp-httplib was not found at build time; scripts/setup.sh installs "
       "libcpp-httplib-dev)");
#endif
}

}  // namespace

Command add_serve(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "serve the model over an OpenAI-compatible HTTP API");
  auto o = std::make_shared<ServeOptions>();
  o->engine.add_to(cmd, /*with_max_model_len=*/true);
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port to listen on (0: any free port, printed at start)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on the API's routes");
  cmd->add_option("--served-model-name", o->served_model_name, "the model id clients send (default: the directory's name)");
  cmd->add_option("--max-queued", o->max_queued, "requests that may wait for a slot; more get 429")->capture_default_str();
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "larger request bodies get 413")->capture_default_str();
  cmd->add_option("--http-threads", o->http_threads, "connections served at once")->capture_default_str();
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout, "seconds in-flight requests get after SIGTERM")
      ->capture_default_str();
  cmd->add_option("--reasoning-parser", o->reasoning_parser,
                  "qwen3: chat answers carry the thinking before </think> as reasoning_content")
      ->check(CLI::IsMember({"qwen3"}));
  return Command{cmd, [o] { run_serve(*o); }};
}

}  // namespace di::cli
