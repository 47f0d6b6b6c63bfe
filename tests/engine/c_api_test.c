/* The serving engine through its C ABI (include/deltainfer/engine.h), from C, on the CPU with the
 * tiny model in argv[1]: requests by ids and by text, streamed from two threads at once; the same
 * greedy prompt twice gives the same tokens; a cancel ends a stream; bad input (an unknown device, a
 * missing model, a tensor-parallel size the model does not split into) gets a status and a message,
 * never a crash. Exits nonzero on the first failed check. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltainfer/engine.h"

static int failures = 0;
#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      ++failures;                                              \
    }                                                          \
  } while (0)

typedef struct {
  di_engine* engine;
  int64_t id;
  int32_t tokens[64];
  int count;
  int reason;
  char text[4096];
} stream;

/* Reads a request's events up to the final one. */
static void* drain(void* arg) {
  stream* s = (stream*)arg;
  s->count = 0;
  s->text[0] = '\0';
  for (;;) {
    di_engine_event event;
    char piece[512];
    const int status = di_engine_next(s->engine, s->id, 120000, &event, piece, sizeof piece);
    if (status != DI_ENGINE_OK) {
      fprintf(stderr, "request %lld: di_engine_next: %s\n", (long long)s->id, di_engine_status_name(status));
      ++failures;
      return NULL;
    }
    if (event.token >= 0 && s->count < 64) s->tokens[s->count++] = event.token;
    if (strlen(s->text) + strlen(piece) < sizeof s->text) strcat(s->text, piece);
    if (event.finished) {
      s->reason = event.finish_reason;
      return NULL;
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODEL_DIR\n", argv[0]);
    return 2;
  }
  char error[1024];
  di_engine_options options;
  di_engine_default_options(&options);
  options.model_dir = argv[1];
  options.device = "cpu";
  options.max_num_seqs = 4;
  options.max_num_batched_tokens = 64;
  options.max_model_len = 512;

  /* A bad option and a missing model: a status and a message. */
  di_engine* engine = NULL;
  di_engine_options bad = options;
  bad.device = "tpu";
  CHECK(di_engine_create(&bad, &engine, error, sizeof error) == DI_ENGINE_FAILED && engine == NULL, "device tpu");
  CHECK(strstr(error, "tpu") != NULL, "the error names the device: %s", error);
  bad = options;
  bad.model_dir = "/nonexistent/model";
  CHECK(di_engine_create(&bad, &engine, error, sizeof error) == DI_ENGINE_FAILED, "missing model");
  CHECK(di_engine_create(NULL, &engine, error, sizeof error) == DI_ENGINE_INVALID_ARGUMENT, "NULL options");
  bad = options;
  bad.tensor_parallel_size = 3; /* the tiny model's 4 attention heads do not split three ways */
  CHECK(di_engine_create(&bad, &engine, error, sizeof error) == DI_ENGINE_FAILED && engine == NULL, "3 ranks");
  CHECK(strstr(error, "4 attention heads") != NULL, "the error names the heads: %s", error);

  if (di_engine_create(&options, &engine, error, sizeof error) != DI_ENGINE_OK) {
    fprintf(stderr, "di_engine_create: %s\n", error);
    return 1;
  }

  /* Two requests by ids with the same greedy prompt, one by text, streamed from three threads. */
  const int32_t prompt[] = {9707, 11, 1879, 0, 1362, 525, 264, 220, 17, 15};
  di_engine_request request;
  di_engine_default_request(&request);
  request.prompt_ids = prompt;
  request.num_prompt_ids = sizeof prompt / sizeof prompt[0];
  request.max_tokens = 8;
  request.ignore_eos = 1;
  stream a = {engine}, b = {engine}, t = {engine};
  CHECK(di_engine_submit(engine, &request, &a.id, error, sizeof error) == DI_ENGINE_OK, "submit a: %s", error);
  CHECK(di_engine_submit(engine, &request, &b.id, error, sizeof error) == DI_ENGINE_OK, "submit b: %s", error);
  di_engine_request text_request;
  di_engine_default_request(&text_request);
  text_request.prompt_text = "The capital of France is";
  text_request.max_tokens = 5;
  text_request.ignore_eos = 1;
  CHECK(di_engine_submit(engine, &text_request, &t.id, error, sizeof error) == DI_ENGINE_OK, "submit text: %s", error);
  pthread_t threads[3];
  pthread_create(&threads[0], NULL, drain, &a);
  pthread_create(&threads[1], NULL, drain, &b);
  pthread_create(&threads[2], NULL, drain, &t);
  for (int i = 0; i < 3; ++i) pthread_join(threads[i], NULL);
  CHECK(a.count == 8 && a.reason == DI_FINISH_LENGTH, "a: %d tokens, %s", a.count, di_engine_finish_reason_name(a.reason));
  CHECK(b.count == 8 && memcmp(a.tokens, b.tokens, sizeof a.tokens) == 0, "the same greedy prompt gives the same tokens");
  CHECK(t.count == 5 && t.reason == DI_FINISH_LENGTH, "text: %d tokens, %s", t.count, di_engine_finish_reason_name(t.reason));
  CHECK(strlen(t.text) > 0, "a text request streams text");

  /* A cancelled request ends with DI_FINISH_CANCELLED. */
  stream c = {engine};
  request.max_tokens = 200;
  CHECK(di_engine_submit(engine, &request, &c.id, error, sizeof error) == DI_ENGINE_OK, "submit c: %s", error);
  CHECK(di_engine_cancel(engine, c.id) == DI_ENGINE_OK, "cancel");
  drain(&c);
  CHECK(c.reason == DI_FINISH_CANCELLED, "cancelled: %s", di_engine_finish_reason_name(c.reason));
  CHECK(di_engine_cancel(engine, c.id) == DI_ENGINE_UNKNOWN_REQUEST, "a finished request cannot be cancelled");

  /* Bad requests: a status, a message, and for queued-then-refused ones a final event. */
  int64_t id = -1;
  di_engine_request empty;
  di_engine_default_request(&empty);
  CHECK(di_engine_submit(engine, &empty, &id, error, sizeof error) == DI_ENGINE_INVALID_ARGUMENT, "no prompt");
  request.max_tokens = 0;
  CHECK(di_engine_submit(engine, &request, &id, error, sizeof error) == DI_ENGINE_REJECTED, "max_tokens 0");
  CHECK(strstr(error, "max_new_tokens") != NULL, "the reason names the field: %s", error);
  stream r = {engine, id};
  drain(&r);
  CHECK(r.reason == DI_FINISH_REJECTED && r.count == 0, "a rejected request's only event");
  request.max_tokens = 4;
  request.temperature = -1.0f;
  CHECK(di_engine_submit(engine, &request, &id, error, sizeof error) == DI_ENGINE_REJECTED, "temperature -1");
  drain(&(stream){engine, id});
  di_engine_event event;
  CHECK(di_engine_next(engine, 987654, 0, &event, NULL, 0) == DI_ENGINE_UNKNOWN_REQUEST, "unknown id");
  CHECK(di_engine_next(NULL, 1, 0, &event, NULL, 0) == DI_ENGINE_INVALID_ARGUMENT, "NULL engine");
  request.abi_version = 999;
  CHECK(di_engine_submit(engine, &request, &id, error, sizeof error) == DI_ENGINE_INVALID_ARGUMENT, "ABI version");

  di_engine_destroy(engine);
  di_engine_destroy(NULL);
  if (failures == 0) printf("engine C ABI: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
