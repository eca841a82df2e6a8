/* step_graph.h - a fixed-shape training step recorded once into a CUDA graph and replayed.
 *
 *   step_graph sg;
 *   step_graph_init(&sg, dev == MT_CUDA && !no_graph);
 *   for each batch:
 *     mt_tensor **outs = step_graph_run(&sg, batch_is_full_size, train_step, &ctx);
 *     ... read outs[0] (the loss) and the step's other outputs (borrowed: valid until the
 *         next step_graph_run or step_graph_free)
 *   step_graph_free(&sg);
 *
 * train_step(ctx, outs) runs forward, loss, zero_grad, backward and the optimizer step on the
 * tensors ctx points to, writes what the caller reads afterwards (the loss, say, and the
 * batch accuracy) to outs[0..], new references, at most STEP_GRAPH_MAX_OUTS, and returns how
 * many. Its inputs must live at fixed addresses (copy each batch into the same device
 * tensors): a replay reads whatever they hold.
 *
 * When enabled, the first full-size step runs eagerly (it creates the gradients and the
 * optimizer state that replays update in place), the second is recorded and then replayed,
 * and every later full-size step is one replay: one launch instead of dozens. Steps of another
 * shape (the last, partial batch of an epoch) run eagerly. Disabled, every step runs eagerly.
 */
#ifndef MT_DEMO_STEP_GRAPH_H
#define MT_DEMO_STEP_GRAPH_H

#include <string.h>

#include "common.h"

#define STEP_GRAPH_MAX_OUTS 4

typedef int (*step_graph_fn)(void *ctx, mt_tensor **outs);

typedef struct step_graph {
  int enabled;
  int warmed;                                /* the eager full-size step ran */
  mt_graph *graph;                           /* the recorded step, or NULL */
  mt_tensor *graph_outs[STEP_GRAPH_MAX_OUTS]; /* the recording's outputs: each replay rewrites them */
  mt_tensor *eager_outs[STEP_GRAPH_MAX_OUTS]; /* the last eager step's outputs */
} step_graph;

static inline void step_graph_release_(mt_tensor **outs) {
  int i;
  for (i = 0; i < STEP_GRAPH_MAX_OUTS; i++) {
    CHECK(mt_tensor_release(outs[i]));
    outs[i] = NULL;
  }
}

static inline void step_graph_init(step_graph *sg, int enabled) {
  memset(sg, 0, sizeof *sg);
  sg->enabled = enabled;
}

/* Runs one step (see above) and returns its outputs, borrowed. */
static inline mt_tensor **step_graph_run(step_graph *sg, int full_size, step_graph_fn fn, void *ctx) {
  step_graph_release_(sg->eager_outs);
  if (!sg->enabled || !full_size || !sg->warmed) {
    sg->warmed = sg->warmed || full_size;
    fn(ctx, sg->eager_outs);
    return sg->eager_outs;
  }
  if (!sg->graph) {  /* record: nothing runs while recording, so replay it once right after */
    CHECK(mt_graph_capture_begin());
    fn(ctx, sg->graph_outs);
    CHECK(mt_graph_capture_end(&sg->graph));
  }
  CHECK(mt_graph_replay(sg->graph));
  return sg->graph_outs;
}

static inline void step_graph_free(step_graph *sg) {
  CHECK(mt_graph_release(sg->graph));
  step_graph_release_(sg->graph_outs);
  step_graph_release_(sg->eager_outs);
  step_graph_init(sg, sg->enabled);
}

#endif
