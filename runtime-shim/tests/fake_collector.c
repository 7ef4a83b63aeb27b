/* A stand-in for the CUPTI collector at its C interface (klaraptor_collect.h), for testing
 * the profiling runtime's side of it without a GPU: built as a shared library that the
 * runtime dlopens through KLARAPTOR_COLLECTOR. It launches each shape once through
 * req->launch, appends a minimal JSON line per shape to req->out_path and, as the real
 * collector does, calls req->progress after each line (status 0 when the launch worked, 1
 * when it failed). FAKE_COLLECTOR_SILENT_LAST=1 leaves the last shape unreported (a
 * collector that stopped early); FAKE_COLLECTOR_FAIL=1 makes it fail at once (nonzero,
 * nothing written). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klaraptor_collect.h"

int klaraptor_collect(const klaraptor_collect_request *req) {
  const char *fail = getenv("FAKE_COLLECTOR_FAIL");
  if (fail && strcmp(fail, "1") == 0) {
    fprintf(stderr, "fake collector: failing as asked\n");
    return 1;
  }
  if (req->abi_version != KLARAPTOR_COLLECT_ABI) return 1;
  const char *silent = getenv("FAKE_COLLECTOR_SILENT_LAST");
  int report_last = !(silent && strcmp(silent, "1") == 0);
  FILE *f = fopen(req->out_path, "a");
  if (!f) return 1;
  for (int i = 0; i < req->n_shapes; i++) {
    int rc = req->launch(req->ctx, i);
    const uint32_t *b = req->blocks + 3 * i;
    fprintf(f, "{\"sizes\":[%lld],\"block\":[%u,%u,%u]%s}\n", (long long)req->data[0], b[0],
            b[1], b[2], rc ? ",\"error\":\"launch failed\"" : "");
    fflush(f);
    if (req->progress && (report_last || i + 1 < req->n_shapes))
      req->progress(req->ctx, i, rc ? 1 : 0);
  }
  fclose(f);
  return 0;
}
