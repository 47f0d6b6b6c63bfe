#include "server/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/sha256.h"
#include "server/openai_protocol.h"

namespace di::server {

namespace {

using Clock = std::chrono::steady_clock;
using httplib::Request;
using httplib::Response;

// How long a running request may leave its connection unwritten: a write is how a client that went
// away is noticed.
constexpr std::chrono::seconds kKeepAlive{1};

// Connections the kernel holds for the accept loop. cpp-httplib listens with a backlog of 5 (fixed
// when the distribution's library was built); past it Linux drops a client's SYN, so a burst of
// clients (a load test's first second) waits a retransmission, or is reset when the handshake's last
// ACK met the full queue. The kernel caps this at net.core.somaxconn.
constexpr int kListenBacklog = 4096;

// JSON text with any invalid UTF-8 (a parse error's message quotes the bytes it choked on) replaced.
std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

void send_error(Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(dump(e.body()), "application/json");
}

void send_json(Response& res, const nlohmann::json& j) {
  res.status = 200;
  res.set_content(dump(j), "application/json");
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Reads a cancelled request's remaining events, so that the engine forgets it (its final event
// comes within a step of the cancel).
void drain(Engine& engine, int64_t id) {
  for (int i = 0; i < 600; ++i) {
    const std::optional<TokenEvent> e = engine.next(id, std::chrono::milliseconds(100));
    if (e && e->finished) return;
  }
  spdlog::warn("serve: request {} did not end within 60 s of its cancel", id);
}

}  // namespace

// One generation request in flight: what its responses need, and its timings.
struct HttpServer::Active {
  Endpoint endpoint;
  std::string id;  // the response id
  int64_t engine_id = -1;
  int64_t created = 0;
  std::string model;
  std::string echo_text;
  bool stream = false, include_usage = false;
  bool logprobs = false;                       // the request asked for log-probabilities
  std::vector<TokenWithLogprobs> token_logprobs;  // a whole response's, or the stream's running offset
  int64_t text_offset = 0;
  std::optional<ReasoningSplitter> reasoning;  // chat with the reasoning parser on
  int64_t prompt_tokens = 0, completion_tokens = 0;
  Clock::time_point submitted, first_token, last_token;
  bool finished = false;
};

HttpServer::HttpServer(ServerOptions options) : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  if (!options_.api_key.empty()) key_digest_ = sha256_hex(options_.api_key.data(), options_.api_key.size());
  const size_t threads = size_t(std::max(options_.http_threads, 4));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_socket_ = int(sock);  // the last socket tried is the one bound
  });
  http_->set_payload_max_length(options_.max_body_bytes);
  install_routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                                      : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port <= 0) fail("serve: cannot listen on {}:{} (in use, or not an address of this machine)", options_.host,
                      options_.port);
  // Listening again on a listening socket only sets its backlog.
  if (listen_socket_ < 0 || ::listen(listen_socket_, kListenBacklog) != 0)
    fail("serve: cannot raise the listen backlog of {}:{} to {}", options_.host, port, kListenBacklog);
  return port;
}

void HttpServer::set_host(EngineHost& host) {
  if (!host.tokenizer()) fail("serve: the model directory has no tokenizer.json, which the API's text needs");
  host_ = &host;
}

void HttpServer::serve() { http_->listen_after_bind(); }

void HttpServer::shutdown() {
  draining_ = true;
  const Clock::time_point deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                        std::chrono::duration<double>(options_.shutdown_timeout_s));
  auto active_count = [&] {
    std::lock_guard lock(active_mutex_);
    return active_.size();
  };
  while (active_count() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (EngineHost* host = host_.load(); host != nullptr && active_count() > 0) {
    std::lock_guard lock(active_mutex_);
    spdlog::info("serve: cancelling {} requests still running at the shutdown deadline", active_.size());
    for (int64_t id : active_) host->engine().cancel(id);
  }
  for (int i = 0; i < 100 && active_count() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  http_->stop();
}

// The API key's check: the digests of the given and the expected key compared byte by byte without
// an early exit, so the time taken says nothing about how much of the key was right.
bool HttpServer::authorized(const std::string& header) const {
  constexpr std::string_view bearer = "Bearer ";
  if (header.compare(0, bearer.size(), bearer) != 0) return false;
  const std::string given = sha256_hex(header.data() + bearer.size(), header.size() - bearer.size());
  unsigned diff = given.size() ^ key_digest_.size();
  for (size_t i = 0; i < std::min(given.size(), key_digest_.size()); ++i) diff |= unsigned(given[i] ^ key_digest_[i]);
  return diff == 0;
}

void HttpServer::install_routes() {
  httplib::Server& s = *http_;

  s.set_pre_routing_handler([this](const Request& req, Response& res) {
    const bool open = req.path == "/health" || req.path == "/metrics";
    if (open || options_.api_key.empty() || authorized(req.get_header_value("Authorization")))
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError{401, "a missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                             "authentication_error", "", "invalid_api_key"});
    metrics_.count_request(req.path, 401);
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib sets itself (no route, a body over the limit, a malformed request) get the
  // API's error body too.
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const Request& req, Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = fmt::format("HTTP {}", res.status);
    if (res.status == 404) message = fmt::format("no such route: {} {}", req.method, req.path);
    if (res.status == 413) message = fmt::format("the request body is larger than {} bytes", options_.max_body_bytes);
    if (res.status == 405) message = fmt::format("method {} is not allowed on {}", req.method, req.path);
    send_error(res, ApiError{res.status, message});
    // Paths of no route share one label: a client cannot grow the metrics without bound.
    metrics_.count_request(res.status == 404 ? "unmatched" : req.path, res.status);
    return httplib::Server::HandlerResponse::Handled;
  }));

  s.Get("/health", [this](const Request&, Response& res) {
    if (!host_.load()) return send_error(res, ApiError{503, "the model is loading", "service_unavailable"});
    if (draining_) return send_error(res, ApiError{503, "the server is shutting down", "service_unavailable"});
    send_json(res, {{"status", "ok"}});
  });

  s.Get("/metrics", [this](const Request&, Response& res) {
    EngineHost* host = host_.load();
    EngineStats stats;
    if (host) stats = host->engine().stats();
    res.set_content(metrics_.render(host ? &stats : nullptr), "text/plain; version=0.0.4");
  });

  s.Get("/v1/models", [this](const Request& req, Response& res) {
    EngineHost* host = host_.load();
    if (!host) return send_error(res, ApiError{503, "the model is loading", "service_unavailable"});
    send_json(res, {{"object", "list"},
                    {"data", nlohmann::json::array({{{"id", options_.model_name},
                                                     {"object", "model"},
                                                     {"created", unix_now()},
                                                     {"owned_by", "deltainfer"},
                                                     {"max_model_len", host->scheduler_config().max_model_len}}})}});
    metrics_.count_request(req.path, 200);
  });

  // Body -> JSON, or the 400 saying why not (nlohmann also refuses invalid UTF-8).
  auto parse_body = [](const Request& req) {
    try {
      return nlohmann::json::parse(req.body);
    } catch (const nlohmann::json::exception& e) {
      throw ApiException{ApiError{400, fmt::format("the body is not valid JSON: {}", e.what())}};
    }
  };
  // A route that needs the model and answers with JSON or an ApiError.
  auto json_route = [this, parse_body](const std::string& path, auto handle) {
    http_->Post(path, [this, path, parse_body, handle](const Request& req, Response& res) {
      EngineHost* host = host_.load();
      try {
        if (!host) throw ApiException{ApiError{503, "the model is loading", "service_unavailable"}};
        send_json(res, handle(*host, parse_body(req)));
      } catch (const ApiException& e) {
        send_error(res, e.error);
      } catch (const std::exception& e) {  // not expected: the request rules throw ApiException
        send_error(res, ApiError{500, fmt::format("internal error: {}", e.what()), "server_error"});
      }
      metrics_.count_request(path, res.status);
    });
  };
  json_route("/tokenize", [](EngineHost& host, const nlohmann::json& body) {
    const std::vector<int32_t> ids = tokenize_body(body, *host.tokenizer());
    return nlohmann::json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", host.scheduler_config().max_model_len}};
  });
  json_route("/detokenize", [](EngineHost& host, const nlohmann::json& body) {
    const nlohmann::json* tokens = body.is_object() && body.contains("tokens") ? &body["tokens"] : nullptr;
    if (!tokens || !tokens->is_array())
      throw ApiException{ApiError{400, "'tokens' (a list of token ids) is required", "invalid_request_error", "tokens"}};
    std::vector<int32_t> ids;
    for (const nlohmann::json& t : *tokens) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= host.tokenizer()->vocab_size())
        throw ApiException{ApiError{400, fmt::format("'tokens' must be ids in [0, {})", host.tokenizer()->vocab_size()),
                                    "invalid_request_error", "tokens"}};
      ids.push_back(int32_t(t.get<int64_t>()));
    }
    return nlohmann::json{{"prompt", host.tokenizer()->decode(ids)}};
  });

  auto generate = [this, parse_body](Endpoint endpoint, const std::string& path) {
    http_->Post(path, [this, endpoint, path, parse_body](const Request& req, Response& res) {
      EngineHost* host = host_.load();
      auto active = std::make_shared<Active>();
      try {
        if (!host) throw ApiException{ApiError{503, "the model is loading", "service_unavailable"}};
        if (draining_) throw ApiException{ApiError{503, "the server is shutting down", "service_unavailable"}};
        ParsedRequest parsed = parse_request(endpoint, parse_body(req), *host->tokenizer(),
                                             {options_.model_name, host->scheduler_config().max_model_len,
                                              host->config().vocab_size});
        active->endpoint = endpoint;
        active->id = fmt::format("{}-{:016x}", endpoint == Endpoint::chat ? "chatcmpl" : "cmpl",
                                 next_id_.fetch_add(1) * 0x9e3779b97f4a7c15ull);
        active->created = unix_now();
        active->model = options_.model_name;
        active->echo_text = parsed.echo_text;
        active->stream = parsed.stream;
        active->include_usage = parsed.include_usage;
        active->logprobs = parsed.generation.sampling.logprobs >= 0;
        active->text_offset = int64_t(parsed.echo_text.size());
        if (endpoint == Endpoint::chat && options_.reasoning_parser == "qwen3")
          active->reasoning.emplace(parsed.prompt_opens_thinking);
        active->prompt_tokens = int64_t(parsed.generation.prompt.size());
        active->submitted = Clock::now();
        const Submitted submitted = host->engine().submit(std::move(parsed.generation));
        if (submitted.result.status == SubmitStatus::queue_full)
          throw ApiException{ApiError{429, "the server's queue is full: " + submitted.result.reason, "rate_limit_error",
                                      "", "queue_full"}};
        if (!submitted.result.accepted()) {
          // The engine's read of a rejected request is its final event; take it so it is forgotten.
          host->engine().next(submitted.id, std::chrono::seconds(1));
          throw ApiException{ApiError{400, submitted.result.reason}};
        }
        active->engine_id = submitted.id;
        std::lock_guard lock(active_mutex_);
        active_.insert(submitted.id);
      } catch (const ApiException& e) {
        send_error(res, e.error);
        metrics_.count_request(path, res.status);
        return;
      } catch (const std::exception& e) {  // not expected: the request rules throw ApiException
        send_error(res, ApiError{500, fmt::format("internal error: {}", e.what()), "server_error"});
        metrics_.count_request(path, res.status);
        return;
      }
      metrics_.count_request(path, 200);

      Engine& engine = host->engine();
      const Tokenizer& tokenizer = *host->tokenizer();
      auto provider = [this, active, &engine, &tokenizer](size_t, httplib::DataSink& sink) {
        Clock::time_point last_write = Clock::now();
        auto write = [&](const std::string& bytes) {
          last_write = Clock::now();
          return sink.write(bytes.data(), bytes.size());
        };
        // Something every kKeepAlive at least, also while tokens come but nothing is sent (a whole
        // response, or text held back): a failed write is how a client that went away is noticed.
        auto keep_alive = [&] {
          return Clock::now() - last_write < kKeepAlive || write(active->stream ? ": keep-alive\n\n" : " ");
        };
        auto sse = [&](const nlohmann::json& j) { return write("data: " + dump(j) + "\n\n"); };
        std::string text = active->echo_text;  // non-streamed: the whole output
        std::string reasoning;                 // ... and its reasoning, with the parser on
        bool first = true;
        if (active->stream && !active->echo_text.empty()) {
          if (!sse(stream_chunk(active->endpoint, active->id, active->created, active->model, active->echo_text, true,
                                nullptr, std::nullopt)))
            return false;
          first = false;
        }
        while (true) {
          const std::optional<TokenEvent> e = engine.next(active->engine_id, kKeepAlive);
          if (!e) {
            if (!keep_alive()) return false;
            continue;
          }
          const Clock::time_point now = Clock::now();
          if (e->token >= 0) {
            if (active->completion_tokens++ == 0) active->first_token = now;
            active->last_token = now;
          }
          const char* finish = e->finished ? finish_reason_text(e->reason) : nullptr;
          if (e->finished) active->finished = true;
          const Usage usage{active->prompt_tokens, active->completion_tokens};
          if (e->finished && !e->error.empty()) {
            const nlohmann::json error = ApiError{500, e->error, "server_error"}.body();
            if (active->stream) sse(error), write("data: [DONE]\n\n");
            else write(dump(error));
            sink.done();
            return true;
          }
          nlohmann::json chunk_logprobs = nullptr;
          if (active->logprobs && e->token >= 0 && e->logprobs) {
            if (active->stream) {
              chunk_logprobs = logprobs_json(active->endpoint, {{e->token, *e->logprobs}}, tokenizer, active->text_offset);
              if (active->endpoint == Endpoint::completions)
                active->text_offset += int64_t(chunk_logprobs["tokens"][0].get<std::string>().size());
            } else {
              active->token_logprobs.emplace_back(e->token, *e->logprobs);
            }
          }
          ReasoningSplitter::Parts parts{"", e->text};
          if (active->reasoning) parts = active->reasoning->push(e->text, e->finished);
          if (active->stream) {
            if (!parts.content.empty() || !parts.reasoning.empty() || first || e->finished || !chunk_logprobs.is_null()) {
              if (!sse(stream_chunk(active->endpoint, active->id, active->created, active->model, parts.content, first,
                                    finish, e->finished ? std::optional<Usage>(usage) : std::nullopt, chunk_logprobs,
                                    parts.reasoning)))
                return false;
              first = false;
            }
            if (e->finished) {
              if (active->include_usage &&
                  !sse(usage_chunk(active->endpoint, active->id, active->created, active->model, usage)))
                return false;
              write("data: [DONE]\n\n");
            }
          } else {
            text += parts.content;
            reasoning += parts.reasoning;
            if (e->finished)
              write(dump(completion_response(
                  active->endpoint, active->id, active->created, active->model, text, finish, usage,
                  active->logprobs ? logprobs_json(active->endpoint, active->token_logprobs, tokenizer, active->text_offset)
                                   : nlohmann::json(nullptr),
                  active->reasoning ? std::optional<std::string>(reasoning) : std::nullopt)));
          }
          if (e->finished) {
            sink.done();
            return true;
          }
          if (!keep_alive()) return false;
        }
      };
      // Runs when the response is over, sent or not: a request whose client went away is cancelled.
      auto release = [this, active, &engine](bool) {
        if (!active->finished) {
          engine.cancel(active->engine_id);
          drain(engine, active->engine_id);
        }
        if (active->completion_tokens > 0) {
          metrics_.observe_ttft(std::chrono::duration<double>(active->first_token - active->submitted).count());
          if (active->completion_tokens > 1)
            metrics_.observe_tpot(std::chrono::duration<double>(active->last_token - active->first_token).count() /
                                  double(active->completion_tokens - 1));
        }
        metrics_.add_tokens(active->prompt_tokens, active->completion_tokens);
        std::lock_guard lock(active_mutex_);
        active_.erase(active->engine_id);
      };
      res.set_chunked_content_provider(active->stream ? "text/event-stream" : "application/json", provider, release);
    });
  };
  generate(Endpoint::completions, "/v1/completions");
  generate(Endpoint::chat, "/v1/chat/completions");
}

}  // namespace di::server
