#include "logits.h"

#include "fsutil.h"
#include "h5util.h"
#include "log.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

int ds_logits_write(const char *path, const float *logits, const int32_t *labels, const char *const *paths,
                    size_t n, char *const *classes, int num_classes)
{
    char *tmp = ds_tmp_name(path);
    ds_h5_quiet q;
    hid_t f = ds_h5_file_create(&q, tmp), str_t = ds_h5_vlen_utf8();
    hsize_t d2[2] = {n, (hsize_t)num_classes}, d1[1] = {n}, dc[1] = {(hsize_t)num_classes};
    int ok = f >= 0 && str_t >= 0 &&
             !ds_h5_write_header(f, "logits") &&
             !ds_h5_write_dataset(f, "logits", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, d2, logits) &&
             !ds_h5_write_dataset(f, "labels", H5T_STD_I32LE, H5T_NATIVE_INT32, 1, d1, labels) &&
             !ds_h5_write_dataset(f, "paths", str_t, str_t, 1, d1, paths) &&
             !ds_h5_write_dataset(f, "classes", str_t, str_t, 1, dc, classes);
    if (str_t >= 0) H5Tclose(str_t);
    int rc = ds_h5_file_finish(&q, f, ok, tmp, "logits file", "a dataset");
    if (rc == 0) rc = ds_commit_file(tmp, path);
    free(tmp);
    return rc;
}
