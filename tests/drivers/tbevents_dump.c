/* tbevents_dump: a TensorBoard event file as text, for tests/shell/test_tensorboard.sh.
 *
 *   tbevents_dump FILE...
 *     checks every record's two CRCs and decodes its Event (tests/tbdecode.h, which shares no
 *     code with the writer), printing one line per item, in file order:
 *       STEP file_version brain.Event:2
 *       STEP session_log START        (or STOP, CHECKPOINT, or the status number)
 *       STEP TAG VALUE                one per scalar, VALUE with %.9g (a float32 exactly)
 *     On a bad record it says which (index and byte offset) and why on stderr and exits 1. */
#include "../tbdecode.h"

static const char *status_name(int s)
{
    static char num[16];
    if (s == 1) return "START";
    if (s == 2) return "STOP";
    if (s == 3) return "CHECKPOINT";
    snprintf(num, sizeof num, "%d", s);
    return num;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: tbevents_dump FILE...\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "tbevents_dump: error: %s: cannot open\n", argv[i]);
            return 1;
        }
        tbd_reader r;
        tbd_event e;
        tbd_open(&r, f);
        int rc;
        while ((rc = tbd_next(&r, &e)) == 1) {
            long long step = (long long)e.step;
            if (e.file_version[0]) printf("%lld file_version %s\n", step, e.file_version);
            if (e.session_status >= 0) printf("%lld session_log %s\n", step, status_name(e.session_status));
            for (int v = 0; v < e.nvalues; v++) printf("%lld %s %.9g\n", step, e.values[v].tag, e.values[v].value);
        }
        fclose(f);
        if (rc < 0) {
            fflush(stdout);
            fprintf(stderr, "tbevents_dump: error: %s: %s\n", argv[i], r.err);
            return 1;
        }
    }
    return 0;
}
