#pragma once
// `deltainfer serve`: the OpenAI-compatible HTTP server over an EngineHost (cpp-httplib, one thread
// per connection from a bounded pool).
//
//   POST /v1/completions, /v1/chat/completions   (server/openai_protocol.h; "stream": server-sent events)
//   GET  /v1/models, /health (503 while loading or draining), /metrics (Prometheus text)
//   POST /tokenize, /detokenize
//
// Every error is an OpenAI-style JSON body with its status: 400 bad input, 401 a missing or wrong
// API key (compared in constant time), 404 an unknown model or path, 413 a body over the limit, 429
// the engine's queue is full, 503 loading or shutting down.
//
// A request whose client goes away is cancelled: the server writes to the connection at least
// once a second while the request runs (its tokens, or an SSE comment, or JSON's insignificant
// whitespace before a whole response), and a failed write cancels the request in the engine.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "engine/engine_host.h"
#include "server/metrics.h"

namespace httplib {
class Server;
}

namespace di::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                                   // 0: any free port (bind() says which)
  std::string api_key;                               // empty: no authentication
  std::string model_name;                            // the id clients name
  size_t max_body_bytes = size_t(16) << 20;          // larger bodies get 413
  int http_threads = 512;                            // connections served at once
  double shutdown_timeout_s = 30;                    // SIGTERM: in-flight requests get this long
  std::string reasoning_parser;                      // "qwen3": chat answers split at "</think>"
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the socket (before the model loads, so that /health answers 503 meanwhile); returns the port.
  int bind();
  // The loaded model: requests are served from now on. `host` outlives the server.
  void set_host(EngineHost& host);
  // Serves until shutdown() (call from another thread).
  void serve();
  // Stops accepting work (503), waits for in-flight requests up to the shutdown timeout, cancels
  // the rest, and stops the listener; serve() then returns.
  void shutdown();

 private:
  struct Active;
  void install_routes();
  bool authorized(const std::string& header) const;

  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int listen_socket_ = -1;  // the socket bind() listens on
  std::atomic<EngineHost*> host_{nullptr};
  std::atomic<bool> draining_{false};
  Metrics metrics_;
  std::string key_digest_;  // SHA-256 of the API key

  // Requests in flight (their engine ids), for the drain.
  std::mutex active_mutex_;
  std::set<int64_t> active_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace di::server
