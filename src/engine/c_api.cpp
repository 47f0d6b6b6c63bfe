// The serving engine's C ABI (include/deltainfer/engine.h) over EngineHost. No exception crosses it.
#include "deltainfer/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <string>

#include "engine/engine_host.h"

struct di_engine {
  std::unique_ptr<di::EngineHost> host;
};

namespace {

void put(char* buffer, size_t capacity, const std::string& text) {
  if (buffer == nullptr || capacity == 0) return;
  const size_t n = std::min(capacity - 1, text.size());
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
}

int finish_code(di::FinishReason reason) {
  switch (reason) {
    case di::FinishReason::none: return DI_FINISH_NONE;
    case di::FinishReason::stop: return DI_FINISH_STOP;
    case di::FinishReason::length: return DI_FINISH_LENGTH;
    case di::FinishReason::cancelled: return DI_FINISH_CANCELLED;
    case di::FinishReason::rejected: return DI_FINISH_REJECTED;
  }
  return DI_FINISH_NONE;
}

}  // namespace

extern "C" {

void di_engine_default_options(di_engine_options* o) {
  if (o == nullptr) return;
  const di::EngineHostOptions d;
  *o = di_engine_options{};
  o->abi_version = DI_ENGINE_ABI_VERSION;
  o->device = "auto";
  o->max_num_seqs = d.max_num_seqs;
  o->max_num_batched_tokens = d.max_num_batched_tokens;
  o->max_waiting = d.max_waiting;
  o->max_model_len = d.max_model_len;
  o->gpu_memory_utilization = d.gpu_memory_utilization;
  o->kv_cache_tokens = d.kv_cache_tokens;
  o->tensor_parallel_size = d.tensor_parallel_size;
}

void di_engine_default_request(di_engine_request* r) {
  if (r == nullptr) return;
  *r = di_engine_request{};
  r->abi_version = DI_ENGINE_ABI_VERSION;
  r->max_tokens = 16;
  r->top_p = 1.0f;
}

int di_engine_create(const di_engine_options* o, di_engine** engine, char* error, size_t error_capacity) {
  if (engine != nullptr) *engine = nullptr;
  if (o == nullptr || engine == nullptr) {
    put(error, error_capacity, "di_engine_create: options and engine must not be NULL");
    return DI_ENGINE_INVALID_ARGUMENT;
  }
  if (o->abi_version != DI_ENGINE_ABI_VERSION) {
    put(error, error_capacity, "di_engine_create: options.abi_version " + std::to_string(o->abi_version) +
                                   ", this library has " + std::to_string(DI_ENGINE_ABI_VERSION) +
                                   " (call di_engine_default_options first)");
    return DI_ENGINE_INVALID_ARGUMENT;
  }
  if (o->model_dir == nullptr) {
    put(error, error_capacity, "di_engine_create: options.model_dir is NULL");
    return DI_ENGINE_INVALID_ARGUMENT;
  }
  di::EngineHostOptions h;
  h.model_dir = o->model_dir;
  h.device = o->device != nullptr ? o->device : "auto";
  h.max_num_seqs = o->max_num_seqs;
  h.max_num_batched_tokens = o->max_num_batched_tokens;
  h.max_waiting = o->max_waiting;
  h.max_model_len = o->max_model_len;
  h.gpu_memory_utilization = o->gpu_memory_utilization;
  h.kv_cache_tokens = o->kv_cache_tokens;
  h.tensor_parallel_size = o->tensor_parallel_size;
  try {
    auto e = std::make_unique<di_engine>();
    e->host = std::make_unique<di::EngineHost>(h);
    *engine = e.release();
    return DI_ENGINE_OK;
  } catch (const std::exception& ex) {
    put(error, error_capacity, ex.what());
    return DI_ENGINE_FAILED;
  }
}

void di_engine_destroy(di_engine* engine) {
  try {
    delete engine;
  } catch (...) {  // a destructor that throws would end the process; the engine is gone either way
  }
}

int di_engine_submit(di_engine* engine, const di_engine_request* r, int64_t* id, char* error, size_t error_capacity) {
  if (engine == nullptr || r == nullptr || id == nullptr) {
    put(error, error_capacity, "di_engine_submit: engine, request and id must not be NULL");
    return DI_ENGINE_INVALID_ARGUMENT;
  }
  if (r->abi_version != DI_ENGINE_ABI_VERSION) {
    put(error, error_capacity, "di_engine_submit: request.abi_version " + std::to_string(r->abi_version) +
                                   " (call di_engine_default_request first)");
    return DI_ENGINE_INVALID_ARGUMENT;
  }
  const bool has_ids = r->num_prompt_ids > 0, has_text = r->prompt_text != nullptr;
  if (has_ids == has_text || (has_ids && r->prompt_ids == nullptr)) {
    put(error, error_capacity, "di_engine_submit: give the prompt either as prompt_ids or as prompt_text");
    return DI_ENGINE_INVALID_ARGUMENT;
  }
  if ((r->num_stop_ids > 0 && r->stop_ids == nullptr) || (r->num_stop_strings > 0 && r->stop_strings == nullptr)) {
    put(error, error_capacity, "di_engine_submit: stop_ids or stop_strings is NULL with a nonzero count");
    return DI_ENGINE_INVALID_ARGUMENT;
  }
  try {
    di::GenerationRequest g;
    if (has_ids) g.prompt.assign(r->prompt_ids, r->prompt_ids + r->num_prompt_ids);
    g.max_tokens = r->max_tokens;
    g.sampling = {.temperature = r->temperature, .top_k = r->top_k, .top_p = r->top_p, .min_p = r->min_p, .seed = r->seed};
    if (r->num_stop_ids > 0) g.stop_ids.assign(r->stop_ids, r->stop_ids + r->num_stop_ids);
    for (size_t i = 0; i < r->num_stop_strings; ++i) {
      if (r->stop_strings[i] == nullptr) {
        put(error, error_capacity, "di_engine_submit: stop_strings[" + std::to_string(i) + "] is NULL");
        return DI_ENGINE_INVALID_ARGUMENT;
      }
      g.stop_strings.emplace_back(r->stop_strings[i]);
    }
    g.ignore_eos = r->ignore_eos != 0;
    di::Engine& e = engine->host->engine();
    const di::Submitted s = has_text ? e.submit_text(r->prompt_text, std::move(g)) : e.submit(std::move(g));
    *id = s.id;
    if (s.result.accepted()) return DI_ENGINE_OK;
    put(error, error_capacity, s.result.reason);
    return s.result.status == di::SubmitStatus::queue_full ? DI_ENGINE_QUEUE_FULL : DI_ENGINE_REJECTED;
  } catch (const std::exception& ex) {
    put(error, error_capacity, ex.what());
    return DI_ENGINE_FAILED;
  }
}

int di_engine_next(di_engine* engine, int64_t id, int64_t timeout_ms, di_engine_event* event, char* text,
                   size_t text_capacity) {
  if (engine == nullptr || event == nullptr || timeout_ms < 0) return DI_ENGINE_INVALID_ARGUMENT;
  *event = di_engine_event{.token = -1};
  put(text, text_capacity, "");
  try {
    const std::optional<di::TokenEvent> e = engine->host->engine().next(id, std::chrono::milliseconds(timeout_ms));
    if (!e) return DI_ENGINE_TIMEOUT;
    event->token = e->token;
    event->finished = e->finished ? 1 : 0;
    event->finish_reason = finish_code(e->reason);
    const std::string& out = e->error.empty() ? e->text : e->error;
    event->text_length = out.size();
    put(text, text_capacity, out);
    return DI_ENGINE_OK;
  } catch (const di::Error&) {
    return DI_ENGINE_UNKNOWN_REQUEST;
  } catch (const std::exception&) {
    return DI_ENGINE_FAILED;
  }
}

int di_engine_cancel(di_engine* engine, int64_t id) {
  if (engine == nullptr) return DI_ENGINE_INVALID_ARGUMENT;
  try {
    return engine->host->engine().cancel(id) ? DI_ENGINE_OK : DI_ENGINE_UNKNOWN_REQUEST;
  } catch (const std::exception&) {
    return DI_ENGINE_FAILED;
  }
}

const char* di_engine_status_name(int status) {
  switch (status) {
    case DI_ENGINE_OK: return "ok";
    case DI_ENGINE_INVALID_ARGUMENT: return "invalid argument";
    case DI_ENGINE_REJECTED: return "rejected";
    case DI_ENGINE_QUEUE_FULL: return "queue full";
    case DI_ENGINE_TIMEOUT: return "timeout";
    case DI_ENGINE_UNKNOWN_REQUEST: return "unknown request";
    case DI_ENGINE_FAILED: return "failed";
  }
  return "unknown status";
}

const char* di_engine_finish_reason_name(int reason) {
  switch (reason) {
    case DI_FINISH_NONE: return "none";
    case DI_FINISH_STOP: return "stop";
    case DI_FINISH_LENGTH: return "length";
    case DI_FINISH_CANCELLED: return "cancelled";
    case DI_FINISH_REJECTED: return "rejected";
  }
  return "unknown";
}

}  // extern "C"
