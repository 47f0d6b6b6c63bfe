/* deltainfer: the C ABI of the serving engine.
 *
 * One engine serves one Qwen3.5 checkpoint (Hugging Face layout) on the GPU or the CPU, many
 * requests at once (continuous batching). Any thread may submit a request, read its stream of
 * token events, or cancel it. Every function returns a di_engine_status; none throws or aborts on
 * bad input, and errors come back as text in the caller's buffer.
 *
 *     di_engine_options options;
 *     di_engine_default_options(&options);
 *     options.model_dir = "Qwen3.5-4B";
 *     di_engine* engine;
 *     char error[512];
 *     if (di_engine_create(&options, &engine, error, sizeof error) != DI_ENGINE_OK) ...
 *     di_engine_request request;
 *     di_engine_default_request(&request);
 *     request.prompt_text = "The capital of France is";
 *     int64_t id;
 *     di_engine_submit(engine, &request, &id, error, sizeof error);
 *     di_engine_event event;
 *     char text[256];
 *     do di_engine_next(engine, id, 10000, &event, text, sizeof text); while (!event.finished);
 *     di_engine_destroy(engine);
 */
#ifndef DELTAINFER_ENGINE_H
#define DELTAINFER_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DI_ENGINE_ABI_VERSION 2

typedef struct di_engine di_engine;

typedef enum {
  DI_ENGINE_OK = 0,
  DI_ENGINE_INVALID_ARGUMENT = 1, /* a null pointer, a bad option or request (the error says which) */
  DI_ENGINE_REJECTED = 2,         /* the request was not queued (invalid); its id still has one final event */
  DI_ENGINE_QUEUE_FULL = 3,       /* the wait queue is full; its id still has one final event */
  DI_ENGINE_TIMEOUT = 4,          /* di_engine_next: no event within the timeout */
  DI_ENGINE_UNKNOWN_REQUEST = 5,  /* never submitted, or its final event was already read */
  DI_ENGINE_FAILED = 6,           /* loading or running the model failed (the error says why) */
} di_engine_status;

typedef enum {
  DI_FINISH_NONE = 0,      /* not finished */
  DI_FINISH_STOP = 1,      /* a stop token or stop string */
  DI_FINISH_LENGTH = 2,    /* max_tokens */
  DI_FINISH_CANCELLED = 3, /* di_engine_cancel, a failed step, or the engine stopped */
  DI_FINISH_REJECTED = 4,  /* not queued */
} di_finish_reason;

typedef struct {
  uint32_t abi_version;              /* DI_ENGINE_ABI_VERSION */
  const char* model_dir;             /* config.json, *.safetensors, tokenizer.json (optional) */
  const char* device;                /* "auto" (GPU when one is visible), "cpu" or "cuda" */
  int64_t max_num_seqs;              /* sequences running at once */
  int64_t max_num_batched_tokens;    /* token budget of one step */
  int64_t max_waiting;               /* bound of the wait queue */
  int64_t max_model_len;             /* prompt + output of one request; 0: min(32768, the model's) */
  double gpu_memory_utilization;     /* GPU: fraction of its memory the engine may use, (0, 1] */
  int64_t kv_cache_tokens;           /* CPU: KV bound (0: max_num_seqs x max_model_len) */
  int32_t tensor_parallel_size;      /* ranks: GPUs 0..N-1 (or CPU threads), each a slice of the model (1) */
} di_engine_options;

typedef struct {
  uint32_t abi_version;              /* DI_ENGINE_ABI_VERSION */
  const int32_t* prompt_ids;         /* the prompt as token ids ... */
  size_t num_prompt_ids;
  const char* prompt_text;           /* ... or as UTF-8 text (needs the model's tokenizer); not both */
  int64_t max_tokens;                /* at least 1 */
  float temperature;                 /* 0: greedy */
  int64_t top_k;                     /* 0: off */
  float top_p;                       /* 1: off */
  float min_p;                       /* 0: off */
  uint64_t seed;                     /* the request's draws depend on it alone */
  const int32_t* stop_ids;           /* generation ends after one of these ... */
  size_t num_stop_ids;
  const char* const* stop_strings;   /* ... or when the text contains one (not included in it) */
  size_t num_stop_strings;
  int ignore_eos;                    /* nonzero: the model's end-of-sequence ids do not stop it */
} di_engine_request;

typedef struct {
  int32_t token;          /* the new token, or -1 on a final event that carries none */
  int finished;           /* nonzero on the request's last event; its id is then forgotten */
  int finish_reason;      /* a di_finish_reason */
  size_t text_length;     /* bytes of text this token completes (UTF-8; may exceed the buffer) */
} di_engine_event;

void di_engine_default_options(di_engine_options* options);
void di_engine_default_request(di_engine_request* request);

/* Loads the model and starts the engine. On failure *engine is NULL and error holds why. */
int di_engine_create(const di_engine_options* options, di_engine** engine, char* error, size_t error_capacity);
/* Stops the engine: live requests end cancelled; no call may use it afterwards. NULL is ignored. */
void di_engine_destroy(di_engine* engine);

/* Queues a request. *id is set whenever the status is OK, REJECTED or QUEUE_FULL. */
int di_engine_submit(di_engine* engine, const di_engine_request* request, int64_t* id, char* error,
                     size_t error_capacity);
/* The request's next event, waiting up to timeout_ms; its text (NUL-terminated, truncated to
 * text_capacity - 1 bytes) goes to text when text is not NULL. The final event's error, if any,
 * also goes there. */
int di_engine_next(di_engine* engine, int64_t id, int64_t timeout_ms, di_engine_event* event, char* text,
                   size_t text_capacity);
/* Cancels a live request: its stream ends with DI_FINISH_CANCELLED within one step. */
int di_engine_cancel(di_engine* engine, int64_t id);

const char* di_engine_status_name(int status);
const char* di_engine_finish_reason_name(int reason);

#ifdef __cplusplus
}
#endif

#endif /* DELTAINFER_ENGINE_H */
