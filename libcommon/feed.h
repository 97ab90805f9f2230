/* feed: moves a loader batch into a model's input on the computing device.
 *
 * The batch's uint8 images and boxes / flips go to the backend (nothing to move on the CPU,
 * whose memory is the host's), then backend->normalize_u8 (or resized_crop_u8 for a batch
 * whose boxes are resized) crops, flips and normalises by the mean/std into the model's
 * input: only bytes cross to an accelerator, never floats.
 *
 * On an accelerator the pixels cross without the host copying them and without the step
 * waiting for them. The loader's pixel buffers are page-locked once (backend host_register),
 * and each batch's pixels are copied from them on the input stream into one of two device
 * buffers, while the compute stream still works on the step before (the boxes and flips, a
 * few bytes an image, go through upload's staging, on the compute stream):
 *
 *   input stream:    [wait consumed[k]]  copy b's pixels -> buffer k  (mark copied)
 *   compute stream:  [wait copied]  normalize buffer k -> model input  (mark consumed[k])
 *
 * k alternates, so a copy overwrites a buffer only after the normalize that read it two
 * batches ago (consumed[k]; for the first two batches, after the buffers' zeroing, which
 * alloc queues on the compute stream), and a normalize reads a buffer only after its copy
 * (copied).
 * The loader may refill b's buffers once the copy has read them: ds_feed_release waits for
 * `copied` before handing b back. Where page-locking is refused, the pixels go through
 * upload too, into the same two buffers. */
#ifndef DS_FEED_H
#define DS_FEED_H

#include "loader.h"
#include "model.h"

#define DS_FEED_REGISTERED 64   /* loader batches page-locked at most (the loader's depth) */

typedef struct {
    uint8_t *images;         /* backend memory [batch, height, width, 3] */
    int32_t *y0, *x0;        /* [batch] */
    int32_t *bh, *bw;        /* [batch] box sizes (batches with `resize` only) */
    uint8_t *flip;           /* [batch] */
} ds_feed_buffer;

typedef struct {
    const ds_backend *be;
    int host;                /* the backend computes in host memory: pass pointers through */
    int batch, height, width; /* the loader's batch shape (ds_batch_shape) */
    ds_feed_buffer buf[2];   /* device buffers, used in turn (not host) */
    int turn;                /* the buffer the next batch goes to */
    int consumed[2];         /* compute-stream mark after the normalize that read buf[k], at
                                first after the buffers' zeroing (alloc); -1: none (host) */
    const ds_batch *copying; /* the batch whose copy `copied` is, until ds_feed_release; NULL: none */
    int copied;              /* input-stream mark after that copy */
    int staged;              /* page-locking was refused: every batch goes through upload */
    const ds_batch *registered[DS_FEED_REGISTERED];  /* loader batches whose pixels are page-locked */
    int nregistered;
} ds_feed;

/* For the batches of one loader: `shape` is ds_loader_batch_shape of it (the buffers hold
 * shape.capacity images of its padded size). */
int ds_feed_init(ds_feed *f, const ds_backend *be, ds_batch_shape shape);
/* Gives back the device buffers and unlocks the loader's pixels: before the loader is freed. */
void ds_feed_free(ds_feed *f);
/* Writes batch b, cut to its crop x crop, into the model's input, first setting the model's
 * input size to the batch's crop when it is another (ds_model_set_input_size: progressive
 * resizing, validation at another crop): the crop travels with the batch. */
int ds_feed_batch(ds_feed *f, ds_model *m, const ds_batch *b, const float mean[3], const float std[3]);
/* ds_feed_batch's work past the model: batch b, cut to b->crop, into out [n, crop, crop, 3]
 * float32 in backend memory. */
void ds_feed_input(ds_feed *f, float *out, const ds_batch *b, const float mean[3], const float std[3]);
/* Returns once nothing queued still reads b's buffers (the loader may refill them). */
void ds_feed_done(ds_feed *f, const ds_batch *b);
/* ds_feed_done, then ds_loader_release: how a batch fed to the model goes back. */
void ds_feed_release(ds_feed *f, ds_loader *L, ds_batch *b);

#endif
