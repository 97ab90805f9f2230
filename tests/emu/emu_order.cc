/* emu_order.cc: the emulated device's stream-order checker. It names a use of device memory
 * on one stream that nothing orders after the last use of the same bytes on another stream
 * (a missing cudaStreamWaitEvent or host synchronisation), whatever the scheduler happened to
 * do: everything here is decided on the host, at the time each call is made.
 *
 *   - Every stream has a vector clock (one counter per stream), advanced by every operation
 *     queued on it. cudaEventRecord captures its stream's clock; cudaStreamWaitEvent joins the
 *     event's clock into the waiting stream's. A host wait (a stream, event or device
 *     synchronisation, a query that answers "done", the implicit waits of the legacy stream
 *     and of cudaFree) joins the waited clocks into the host's, and every operation queued
 *     later joins the host's clock into its stream's: work issued after a host wait is
 *     ordered after what it waited for.
 *   - Every operation's declared ranges (emu::enqueue's `uses`: copies, memsets, cuDNN, cuBLAS
 *     and NCCL calls with their extents; a kernel with the first byte of each pointer
 *     argument, all the emulator knows of its extents) are taken as read and written: the
 *     checker keeps, per byte range of device memory, the last operation that used it (its
 *     stream, its clock, its name). A use on stream B of bytes last used on stream A != B by
 *     an operation B's clock does not cover is a defect.
 *
 * Taking every use as a write is conservative: two streams that only read the same bytes at
 * once are reported too (ds has no such use). The one host clock is the process's, not a
 * thread's: a host thread's wait orders the work another thread queues later (fewer reports,
 * never a false one from that). DS_EMU_ORDER=0 turns the checker off. */
#include "emu.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace emu {

namespace {

typedef std::vector<uint64_t> vclock;   /* indexed by stream id */

struct user {
    uintptr_t end;   /* the range is [key, end) */
    int stream;
    uint64_t clock;   /* the stream's own count at the operation */
    std::string name;
};

struct state {
    std::mutex m;
    bool on;
    vclock host;
    std::vector<vclock> streams;   /* by stream id */
    std::unordered_map<const void *, vclock> events;
    std::map<uintptr_t, user> users;   /* disjoint ranges, by start */
    state()
    {
        const char *v = getenv("DS_EMU_ORDER");
        on = !(v && !strcmp(v, "0"));
    }
};

state &st()
{
    static state *s = new state;   /* never destroyed: streams' workers outlive main */
    return *s;
}

void join(vclock &into, const vclock &from)
{
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); i++)
        if (from[i] > into[i]) into[i] = from[i];
}

vclock &stream_clock(state &s, int id)
{
    if ((size_t)id >= s.streams.size()) s.streams.resize(id + 1);
    vclock &c = s.streams[id];
    if ((size_t)id >= c.size()) c.resize(id + 1, 0);
    return c;
}

bool covers(const vclock &c, int stream, uint64_t clock) { return (size_t)stream < c.size() && c[stream] >= clock; }

void check_and_record(state &s, int id, const vclock &c, const std::string &name, uintptr_t a, uintptr_t b)
{
    auto it = s.users.upper_bound(a);
    if (it != s.users.begin()) --it;
    if (it != s.users.end() && it->second.end <= a) ++it;
    for (auto j = it; j != s.users.end() && j->first < b; ++j) {
        const user &u = j->second;
        if (u.stream == id || covers(c, u.stream, u.clock)) continue;
        uintptr_t lo = j->first > a ? j->first : a, hi = u.end < b ? u.end : b;
        const void *base;
        size_t size;
        kind_of((const void *)lo, &base, &size);
        defect("unordered: bytes [%zu, %zu) of the device allocation at %p (%zu bytes) written on stream %d by %s "
               "(its operation #%llu) and used on stream %d by %s without an event between them",
               (size_t)(lo - (uintptr_t)base), (size_t)(hi - (uintptr_t)base), base, size, u.stream, u.name.c_str(),
               (unsigned long long)u.clock, id, name.c_str());
    }
    /* the new use replaces what it overlaps: trim the ranges at its ends, drop those inside */
    std::vector<std::pair<uintptr_t, user>> keep;
    while (it != s.users.end() && it->first < b) {
        if (it->first < a) keep.push_back({it->first, {a, it->second.stream, it->second.clock, it->second.name}});
        if (it->second.end > b) keep.push_back({b, it->second});
        it = s.users.erase(it);
    }
    for (auto &k : keep) s.users.insert(k);
    s.users[a] = {b, id, c[id], name};
}

}  // namespace

void order_op(int stream, const std::string &name, const std::vector<range> &uses)
{
    state &s = st();
    if (!s.on) return;
    std::vector<std::pair<uintptr_t, uintptr_t>> dev;
    for (const range &r : uses) {
        const void *base;
        size_t size;
        if (!r.p || !r.bytes || kind_of(r.p, &base, &size) != MEM_DEVICE) continue;
        dev.push_back({(uintptr_t)r.p, (uintptr_t)r.p + r.bytes});
    }
    std::lock_guard<std::mutex> lock(s.m);
    vclock &c = stream_clock(s, stream);
    join(c, s.host);
    c[stream]++;
    for (auto &r : dev) check_and_record(s, stream, c, name, r.first, r.second);
}

void order_host_waits(int stream)
{
    state &s = st();
    if (!s.on) return;
    std::lock_guard<std::mutex> lock(s.m);
    join(s.host, stream_clock(s, stream));
}

void order_record(const void *event, int stream)
{
    state &s = st();
    if (!s.on) return;
    std::lock_guard<std::mutex> lock(s.m);
    s.events[event] = stream_clock(s, stream);
}

void order_wait(int stream, const void *event)
{
    state &s = st();
    if (!s.on) return;
    std::lock_guard<std::mutex> lock(s.m);
    auto it = s.events.find(event);
    if (it != s.events.end()) join(stream_clock(s, stream), it->second);
}

void order_host_waits_event(const void *event)
{
    state &s = st();
    if (!s.on) return;
    std::lock_guard<std::mutex> lock(s.m);
    auto it = s.events.find(event);
    if (it != s.events.end()) join(s.host, it->second);
}

}  // namespace emu
