/* tbevents: TensorBoard event files, written as TensorFlow writes them (docs/DESIGN.md §2).
 *
 * A file is a TFRecord stream; each record is
 *     uint64 length | uint32 masked CRC32C of the 8 length bytes | data | uint32 masked CRC32C of data
 * (little-endian; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8), and each record's data is
 * one serialized tensorflow.Event (tensorflow/core/util/event.proto):
 *     Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
 *                  Summary summary = 5; SessionLog session_log = 7; }   (6: the deprecated LogMessage)
 *     Summary    { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
 *     SessionLog { SessionStatus status = 1; }    START = 1
 * encoded here by hand (varints, fixed64/fixed32, length-delimited fields): no protobuf
 * library. The first record of a file is the file_version "brain.Event:2"; the second a
 * SessionLog START at the step the writer was opened with, on which TensorBoard drops every
 * event it read earlier at that step or later (what torch.utils.tensorboard's SummaryWriter
 * writes for purge_step): a resumed run's new file hides what the old one logged past the
 * resumed checkpoint. Every record is flushed and fsynced as it is written, so a live
 * TensorBoard sees each row and a crash leaves whole records. */
#ifndef DS_TBEVENTS_H
#define DS_TBEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DS_TB_FILE_PREFIX "events.out.tfevents."
#define DS_TB_FILE_VERSION "brain.Event:2"

typedef struct {
    FILE *f;
    char *path;
} ds_tb_writer;

/* One scalar of a summary; stored as a float32 simple_value. */
typedef struct {
    const char *tag;
    double value;
} ds_tb_scalar;

/* Creates DIR/events.out.tfevents.<10-digit seconds>.<host> (a file of its own, never an
 * existing one: its seconds are past those of every event file already in DIR, so TensorBoard,
 * which reads a directory's files in name order, reads it last), writes the file_version
 * record and a SessionLog START at purge_step. */
int ds_tb_open(ds_tb_writer *w, const char *dir, int64_t purge_step);
/* One Event at `step` whose summary holds the n scalars. */
int ds_tb_write_scalars(ds_tb_writer *w, int64_t step, const ds_tb_scalar *s, int n);
void ds_tb_close(ds_tb_writer *w);

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), and TFRecord's mask of it. */
uint32_t ds_crc32c(const void *data, size_t n);
uint32_t ds_tb_mask_crc(uint32_t crc);

#endif
