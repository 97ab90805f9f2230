#include "logits.h"

#include "fsutil.h"
#include "log.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hid_t vlen_utf8(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

static int write_dataset(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims, const void *data)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    int rc = -1;
    if (sp < 0 || dcpl < 0 || H5Pset_obj_track_times(dcpl, 0) < 0) goto out;
    if ((d = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0) goto out;
    rc = dims[0] == 0 || H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0 ? 0 : -1;
out:
    if (d >= 0) H5Dclose(d);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

static int write_attr(hid_t f, const char *name, hid_t type, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR), a = -1;
    int rc = -1;
    if (sp >= 0 && (a = H5Acreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT)) >= 0 && H5Awrite(a, type, v) >= 0)
        rc = 0;
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

int ds_logits_write(const char *path, const float *logits, const int32_t *labels, const char *const *paths,
                    size_t n, char *const *classes, int num_classes)
{
    size_t len = strlen(path) + 5;
    char *tmp = ds_xmalloc(len);
    snprintf(tmp, len, "%s.tmp", path);
    H5E_auto2_t func;
    void *data;
    H5Eget_auto2(H5E_DEFAULT, &func, &data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int rc = -1, fmt = 1;
    const char *kind = "logits";
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), f = -1, str_t = vlen_utf8();
    if (fcpl < 0 || str_t < 0 || H5Pset_obj_track_times(fcpl, 0) < 0) goto out;
    if ((f = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT)) < 0) goto out;
    hsize_t d2[2] = {n, (hsize_t)num_classes}, d1[1] = {n}, dc[1] = {(hsize_t)num_classes};
    if (write_attr(f, "ds_format", H5T_NATIVE_INT, &fmt) || write_attr(f, "ds_kind", str_t, &kind)) goto out;
    if (write_dataset(f, "logits", H5T_NATIVE_FLOAT, 2, d2, logits)) goto out;
    if (write_dataset(f, "labels", H5T_NATIVE_INT32, 1, d1, labels)) goto out;
    if (write_dataset(f, "paths", str_t, 1, d1, paths)) goto out;
    if (write_dataset(f, "classes", str_t, 1, dc, classes)) goto out;
    rc = 0;
out:
    if (f >= 0 && H5Fclose(f) < 0) rc = -1;
    if (str_t >= 0) H5Tclose(str_t);
    if (fcpl >= 0) H5Pclose(fcpl);
    H5Eset_auto2(H5E_DEFAULT, func, data);
    if (rc) {
        unlink(tmp);
        ds_err("%s: cannot write the logits file (HDF5 error)", tmp);
    } else {
        rc = ds_commit_file(tmp, path);
    }
    free(tmp);
    return rc;
}
