#include "h5util.h"
#include "fsutil.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>

/* HDF5 closes every file still open from an atexit handler. After an H5Fclose that failed
 * (a full disk: the final flush got EFBIG or ENOSPC) the file's half-torn-down state makes
 * that handler crash, turning a clean "exit 1" into a SIGSEGV. ds closes what it opens, so
 * the handler is not needed: it is switched off before HDF5 initialises. */
__attribute__((constructor)) static void h5_no_atexit(void) { H5dont_atexit(); }

void ds_h5_quiet_begin(ds_h5_quiet *q)
{
    H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void ds_h5_quiet_end(const ds_h5_quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->func, q->data); }

hid_t ds_h5_file_create(ds_h5_quiet *q, const char *tmp)
{
    ds_h5_quiet_begin(q);
    errno = 0; /* what a failing write() sets (EFBIG, ENOSPC) names the cause in finish */
    hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), f = -1;
    if (fcpl >= 0 && H5Pset_obj_track_times(fcpl, 0) >= 0) f = H5Fcreate(tmp, H5F_ACC_TRUNC, fcpl, H5P_DEFAULT);
    if (fcpl >= 0) H5Pclose(fcpl);
    return f;
}

int ds_h5_file_finish(ds_h5_quiet *q, hid_t f, int ok, const char *tmp, const char *kind, const char *what)
{
    int err = errno;
    if (f < 0) ok = 0;
    if (f >= 0 && H5Fclose(f) < 0 && ok) {
        ok = 0;
        what = "close";
        err = errno;
    }
    ds_h5_quiet_end(q);
    if (ok) return 0;
    ds_err("%s: cannot write %s (%s failed in HDF5%s%s)", tmp, kind, what, err ? ": " : "", err ? strerror(err) : "");
    remove(tmp);
    return -1;
}

int ds_h5_write_header(hid_t f, const char *kind)
{
    int version = DS_FORMAT_VERSION;
    return ds_h5_attr_write(f, "ds_format", H5T_STD_I32LE, H5T_NATIVE_INT, 0, &version) ||
                   ds_h5_attr_write_str(f, "ds_kind", kind)
               ? -1
               : 0;
}

int ds_h5_check_header(hid_t f, const char *kind, char *why, size_t why_len)
{
    int version;
    char *got = NULL;
    if (ds_h5_attr_read(f, "ds_format", H5T_INTEGER, H5T_NATIVE_INT, 1, &version))
        snprintf(why, why_len, "no ds_format attribute (not a ds file)");
    else if (version != DS_FORMAT_VERSION)
        snprintf(why, why_len, "unknown ds_format version %d (this build reads version %d)", version,
                 DS_FORMAT_VERSION);
    else if (!(got = ds_h5_attr_read_str(f, "ds_kind")))
        snprintf(why, why_len, "no ds_kind attribute (not a ds file)");
    else if (strcmp(got, kind))
        snprintf(why, why_len, "ds_kind is '%.32s', not '%s'", got, kind);
    else {
        free(got);
        return 0;
    }
    free(got);
    return -1;
}

hid_t ds_h5_vlen_utf8(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    if (H5Tset_size(t, H5T_VARIABLE) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

int ds_h5_attr_write(hid_t loc, const char *name, hid_t file_t, hid_t mem_t, int n, const void *v)
{
    hsize_t dims[1] = {(hsize_t)n};
    hid_t sp = n ? H5Screate_simple(1, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = sp < 0 ? -1 : H5Acreate2(loc, name, file_t, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, mem_t, v) < 0 ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

int ds_h5_attr_write_str(hid_t loc, const char *name, const char *v)
{
    size_t len = strlen(v);
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0) return -1;
    int rc = -1;
    char pad[2] = {0, 0};
    /* HDF5 has no zero-length fixed strings: an empty value is one NUL byte. */
    if (H5Tset_size(t, len ? len : 1) >= 0 && H5Tset_cset(t, H5T_CSET_UTF8) >= 0 &&
        H5Tset_strpad(t, H5T_STR_NULLPAD) >= 0)
        rc = ds_h5_attr_write(loc, name, t, t, 0, len ? v : pad);
    H5Tclose(t);
    return rc;
}

int ds_h5_attr_read(hid_t loc, const char *name, H5T_class_t cls, hid_t mem_t, int n, void *v)
{
    if (H5Aexists(loc, name) <= 0) return -1;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    int rc = -1;
    if (t >= 0 && sp >= 0 && H5Tget_class(t) == cls && H5Sget_simple_extent_npoints(sp) == n &&
        H5Aread(a, mem_t, v) >= 0)
        rc = 0;
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}

char *ds_h5_attr_read_str(hid_t loc, const char *name)
{
    if (H5Aexists(loc, name) <= 0) return NULL;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return NULL;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a), mt = -1;
    char *out = NULL;
    if (t < 0 || sp < 0 || H5Tget_class(t) != H5T_STRING || H5Sget_simple_extent_npoints(sp) != 1) goto done;
    if (H5Tis_variable_str(t) > 0) {
        char *s = NULL;
        if ((mt = ds_h5_vlen_utf8()) >= 0 && H5Aread(a, mt, &s) >= 0) {
            out = ds_xstrdup(s ? s : "");
            H5free_memory(s);
        }
    } else {
        /* Read with one byte more and NUL termination, whatever padding the file used. */
        size_t sz = H5Tget_size(t);
        if (sz == 0 || (mt = H5Tcopy(t)) < 0 || H5Tset_size(mt, sz + 1) < 0 ||
            H5Tset_strpad(mt, H5T_STR_NULLTERM) < 0)
            goto done;
        out = ds_xcalloc(sz + 1, 1);
        if (H5Aread(a, mt, out) < 0) {
            free(out);
            out = NULL;
        }
    }
done:
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return out;
}

int ds_h5_write_dataset(hid_t loc, const char *name, hid_t file_t, hid_t mem_t, int rank,
                        const hsize_t *dims, const void *data)
{
    hid_t sp = rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), d = -1;
    int rc = -1;
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    if (sp < 0 || dcpl < 0 || H5Pset_obj_track_times(dcpl, 0) < 0) goto out;
    if ((d = H5Dcreate2(loc, name, file_t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0) goto out;
    rc = n == 0 || H5Dwrite(d, mem_t, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0 ? 0 : -1;
out:
    if (d >= 0) H5Dclose(d);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

hid_t ds_h5_create_group(hid_t loc, const char *name)
{
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    if (gcpl < 0) return -1;
    hid_t g = H5Pset_obj_track_times(gcpl, 0) < 0 ? -1 : H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
    return g;
}

char **ds_h5_read_strings(hid_t d, size_t n)
{
    hid_t t = ds_h5_vlen_utf8();
    if (t < 0) return NULL;
    char **raw = ds_xcalloc(n ? n : 1, sizeof *raw);
    if (n && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0) {
        free(raw);
        H5Tclose(t);
        return NULL;
    }
    char **out = ds_xmalloc((n ? n : 1) * sizeof *out);
    for (size_t i = 0; i < n; i++) {
        out[i] = ds_xstrdup(raw[i] ? raw[i] : "");
        H5free_memory(raw[i]);
    }
    free(raw);
    H5Tclose(t);
    return out;
}
