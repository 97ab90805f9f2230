#include "logits.h"

#include "fsutil.h"
#include "h5util.h"
#include "log.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ds_logits_write(const char *path, const float *logits, const int32_t *labels, const char *const *paths,
                    size_t n, char *const *classes, int num_classes)
{
    size_t len = strlen(path) + 5;
    char *tmp = ds_xmalloc(len);
    snprintf(tmp, len, "%s.tmp", path);
    ds_h5_quiet q;
    ds_h5_quiet_begin(&q);
    int rc = -1, fmt = 1;
    const char *kind = "logits";
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), f = -1, str_t = ds_h5_vlen_utf8();
    if (fcpl < 0 || str_t < 0 || H5Pset_obj_track_times(fcpl, 0) < 0) goto out;
    if ((f = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT)) < 0) goto out;
    hsize_t d2[2] = {n, (hsize_t)num_classes}, d1[1] = {n}, dc[1] = {(hsize_t)num_classes};
    if (ds_h5_attr_write(f, "ds_format", H5T_NATIVE_INT, H5T_NATIVE_INT, 0, &fmt) || ds_h5_attr_write(f, "ds_kind", str_t, str_t, 0, &kind)) goto out;
    if (ds_h5_write_dataset(f, "logits", H5T_NATIVE_FLOAT, H5T_NATIVE_FLOAT, 2, d2, logits)) goto out;
    if (ds_h5_write_dataset(f, "labels", H5T_NATIVE_INT32, H5T_NATIVE_INT32, 1, d1, labels)) goto out;
    if (ds_h5_write_dataset(f, "paths", str_t, str_t, 1, d1, paths)) goto out;
    if (ds_h5_write_dataset(f, "classes", str_t, str_t, 1, dc, classes)) goto out;
    rc = 0;
out:
    if (f >= 0 && H5Fclose(f) < 0) rc = -1;
    if (str_t >= 0) H5Tclose(str_t);
    if (fcpl >= 0) H5Pclose(fcpl);
    ds_h5_quiet_end(&q);
    if (rc) {
        unlink(tmp);
        ds_err("%s: cannot write the logits file (HDF5 error)", tmp);
    } else {
        rc = ds_commit_file(tmp, path);
    }
    free(tmp);
    return rc;
}
