/* linescan.match compiled: a line template run over many lines, one line at a time.
 *
 * The numpy code in linescan.py is the definition and the fallback; this module runs the
 * same template (compiled by linescan._program into int64 ops and a string of literal
 * bytes) with the same answers, bit for bit: tests/test_logs_linescan.py runs both over
 * the same lines. Why it exists (measured, docs/logs.md): numpy makes one pass over every
 * line per token of the template, ~3.6 s of a 7.6 s llama.cpp scan of 1 GiB; here each
 * line is read once.
 *
 * run(buf, end, starts, prog, consts, caps, cursor) -> None or the reason (str) a line is
 * unusual. buf: the block's bytes (bytes past `end` read as 0); starts: int64 places where
 * the template starts; prog: int64 ops; consts: the literals; caps: float64, slot-major
 * (caps[slot * n + line]), NaN where nothing is captured; cursor: int64, where the
 * template ended on each line.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* memmem */
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DIGITS 15
#define SET_MAX 128

enum { OP_LIT = 1, OP_ALT, OP_END, OP_WHICH, OP_INT, OP_DEC, OP_FDEC, OP_FIX, OP_SP, OP_SP0,
       OP_SET, OP_OPT };

static const char *SHAPE = "a line of another shape";
static const char *DIGITS = "a number of too many digits";
static const char *RUN = "a run of too many bytes";

typedef struct {
    const uint8_t *b;
    Py_ssize_t end;
    const int64_t *prog;
    const uint8_t *consts;
    double *caps;
    Py_ssize_t n, line, slots;
} Ctx;

static inline int byte_at(const Ctx *x, int64_t i) {
    return (i >= 0 && i < x->end) ? x->b[i] : 0;
}

static inline int lit_at(const Ctx *x, int64_t c, int64_t off, int64_t len) {
    if (c < 0 || c > x->end - len) {  /* bytes past the end read as 0 (no overflow: c <= end) */
        for (int64_t k = 0; k < len; k++)
            if (byte_at(x, c + k) != x->consts[off + k]) return 0;
        return 1;
    }
    return memcmp(x->b + c, x->consts + off, (size_t)len) == 0;
}

static inline int is_digit(int ch) { return ch >= '0' && ch <= '9'; }

/* The digit run at c: its length (up to MAX_DIGITS + 1) and value (of the first
 * MAX_DIGITS digits). */
static inline int64_t digits(const Ctx *x, int64_t c, int64_t *value) {
    int64_t n = 0, v = 0;
    while (n <= MAX_DIGITS && is_digit(byte_at(x, c + n))) {
        if (n < MAX_DIGITS) v = v * 10 + (byte_at(x, c + n) - '0');
        n++;
    }
    *value = v;
    return n;
}

static inline void put(const Ctx *x, int64_t slot, double v) {
    if (slot >= 0 && slot < x->slots) x->caps[slot * x->n + x->line] = v;
}

static const double P10[MAX_DIGITS + 1] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
static const int64_t I10[MAX_DIGITS + 1] = {
    1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL, 10000000LL, 100000000LL,
    1000000000LL, 10000000000LL, 100000000000LL, 1000000000000LL, 10000000000000LL,
    100000000000000LL, 1000000000000000LL};

/* Whether ops [pc, stop) are well formed: each op's operands inside the program, each
 * literal inside consts, lengths and counts small (the programs come from
 * linescan._Program; this keeps a wrong one from reading past its buffers). */
static int check_lit(const int64_t *p, int64_t q, Py_ssize_t nconst) {
    return p[q] >= 0 && p[q + 1] >= 0 && p[q + 1] <= 4096 && p[q] + p[q + 1] <= nconst;
}

static int check_prog(const int64_t *p, int64_t pc, int64_t stop, Py_ssize_t nconst) {
    while (pc < stop) {
        int64_t op = p[pc], need;
        switch (op) {
        case OP_LIT: need = 3; break;
        case OP_ALT: case OP_END:
            need = pc + 1 < stop && p[pc + 1] >= 0 && p[pc + 1] <= 256 ? 2 + 2 * p[pc + 1] : 0;
            break;
        case OP_WHICH:
            need = pc + 2 < stop && p[pc + 2] >= 0 && p[pc + 2] <= 256 ? 3 + 2 * p[pc + 2] : 0;
            break;
        case OP_INT: case OP_DEC: case OP_FDEC: need = 2; break;
        case OP_FIX: need = 3; break;
        case OP_SP: case OP_SP0: need = 1; break;
        case OP_SET: need = 7; break;
        case OP_OPT:
            need = pc + 3 < stop && p[pc + 3] >= 0 && p[pc + 3] <= stop - pc ? 4 + p[pc + 3] : 0;
            break;
        default: return 0;
        }
        if (need < 1 || need > stop - pc) return 0;
        switch (op) {
        case OP_LIT:
            if (!check_lit(p, pc + 1, nconst)) return 0;
            break;
        case OP_ALT: case OP_END: case OP_WHICH: {
            int64_t q = op == OP_WHICH ? pc + 3 : pc + 2;
            for (; q < pc + need; q += 2)
                if (!check_lit(p, q, nconst)) return 0;
            break;
        }
        case OP_FIX:
            if (p[pc + 1] < 0 || p[pc + 1] > MAX_DIGITS) return 0;
            break;
        case OP_SET:
            if (!check_lit(p, pc + 1, nconst) || p[pc + 3] < 0 || p[pc + 3] > SET_MAX ||
                p[pc + 4] < 0 || p[pc + 4] > SET_MAX)
                return 0;
            break;
        case OP_OPT:
            if (!check_lit(p, pc + 1, nconst) || !check_prog(p, pc + 4, pc + need, nconst))
                return 0;
            break;
        }
        pc += need;
    }
    return 1;
}

/* Run ops [pc, stop) from *c; NULL when the line matches, else the reason. */
static const char *run_ops(const Ctx *x, int64_t pc, int64_t stop, int64_t *c) {
    const int64_t *p = x->prog;
    while (pc < stop) {
        int64_t op = p[pc];
        switch (op) {
        case OP_LIT:
            if (!lit_at(x, *c, p[pc + 1], p[pc + 2])) return SHAPE;
            *c += p[pc + 2];
            pc += 3;
            break;
        case OP_ALT:
        case OP_END:
        case OP_WHICH: {
            int64_t slot = -1, q = pc + 1;
            if (op == OP_WHICH) slot = p[q++];
            int64_t k = p[q++], step = -1, idx = -1;
            for (int64_t i = 0; i < k; i++) {
                if (lit_at(x, *c, p[q + 2 * i], p[q + 2 * i + 1])) {
                    step = p[q + 2 * i + 1];
                    idx = i;
                    break;
                }
            }
            if (step < 0) return SHAPE;
            if (op == OP_WHICH) put(x, slot, (double)idx);
            if (op != OP_END) *c += step;
            pc = q + 2 * k;
            break;
        }
        case OP_INT:
        case OP_DEC:
        case OP_FDEC: {
            int64_t slot = p[pc + 1], v1, v2 = 0, n2 = 0;
            int64_t n1 = digits(x, *c, &v1);
            if (n1 > MAX_DIGITS) return DIGITS;
            if (n1 == 0) return SHAPE;
            int64_t total = n1;
            if (op != OP_INT) {
                int64_t c1 = *c + n1;
                int frac = byte_at(x, c1) == '.' && is_digit(byte_at(x, c1 + 1));
                if (op == OP_FDEC && !frac) return SHAPE;
                if (frac) {
                    n2 = digits(x, c1 + 1, &v2);
                    if (n2 > MAX_DIGITS) return DIGITS;
                    total = n1 + 1 + n2;
                }
            }
            if (slot >= 0) {
                if (op == OP_INT) {
                    put(x, slot, (double)v1);
                } else {
                    if (n1 + n2 > MAX_DIGITS) return DIGITS;
                    put(x, slot, (double)(v1 * I10[n2] + v2) / P10[n2]);
                }
            }
            *c += total;
            pc += 2;
            break;
        }
        case OP_FIX: {
            int64_t width = p[pc + 1], slot = p[pc + 2], v;
            int64_t n = digits(x, *c, &v);
            if (n > MAX_DIGITS) return DIGITS;
            if (n != width) return SHAPE;
            put(x, slot, (double)v);
            *c += width;
            pc += 3;
            break;
        }
        case OP_SP:
        case OP_SP0: {
            int64_t n = 0;
            while (n < SET_MAX && byte_at(x, *c + n) == ' ') n++;
            if (n >= SET_MAX) return RUN;
            if (op == OP_SP && n == 0) return SHAPE;
            *c += n;
            pc += 1;
            break;
        }
        case OP_SET: {
            int64_t off = p[pc + 1], len = p[pc + 2], least = p[pc + 3], back = p[pc + 4];
            int64_t s_at = p[pc + 5], s_n = p[pc + 6], n = 0;
            uint8_t lut[256];
            memset(lut, 0, sizeof lut);
            for (int64_t i = 0; i < len; i++) lut[x->consts[off + i]] = 1;
            while (n < SET_MAX && lut[byte_at(x, *c + n)]) n++;
            if (n >= SET_MAX) return RUN;
            if (n < least + back) return SHAPE;
            put(x, s_at, (double)*c);
            put(x, s_n, (double)(n - back));
            *c += n - back > 0 ? n - back : 0;
            pc += 7;
            break;
        }
        case OP_OPT: {
            int64_t sub = p[pc + 3];
            if (lit_at(x, *c, p[pc + 1], p[pc + 2])) {
                const char *why = run_ops(x, pc + 4, pc + 4 + sub, c);
                if (why != NULL) return why;
            }
            pc += 4 + sub;
            break;
        }
        default:
            return "an unknown template op";
        }
    }
    return NULL;
}

static PyObject *run(PyObject *self, PyObject *args) {
    Py_buffer buf, starts, prog, consts, caps, cursor;
    Py_ssize_t end;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*ny*y*y*w*w*", &buf, &end, &starts, &prog, &consts, &caps,
                          &cursor))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = starts.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t plen = prog.len / (Py_ssize_t)sizeof(int64_t);
    if (end < 0 || end > buf.len || cursor.len < n * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "linescan: bad buffer sizes");
        goto done;
    }
    const int64_t *st = (const int64_t *)starts.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (st[i] < 0 || st[i] > end) {  /* a template starts inside the block's lines */
            PyErr_SetString(PyExc_ValueError, "linescan: a start outside the buffer");
            goto done;
        }
    }
    if (!check_prog((const int64_t *)prog.buf, 0, plen, consts.len)) {
        PyErr_SetString(PyExc_ValueError, "linescan: a malformed template program");
        goto done;
    }
    Ctx x = {(const uint8_t *)buf.buf, end, (const int64_t *)prog.buf,
             (const uint8_t *)consts.buf, (double *)caps.buf, n, 0,
             n ? caps.len / (Py_ssize_t)sizeof(double) / n : 0};
    int64_t *cur = (int64_t *)cursor.buf;
    const char *why = NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t c = st[i];
        x.line = i;
        why = run_ops(&x, 0, plen, &c);
        if (why != NULL) break;
        cur[i] = c;
    }
    Py_END_ALLOW_THREADS
    if (why != NULL) {
        out = PyUnicode_FromString(why);
    } else {
        Py_INCREF(Py_None);
        out = Py_None;
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&prog);
    PyBuffer_Release(&consts);
    PyBuffer_Release(&caps);
    PyBuffer_Release(&cursor);
    return out;
}

/* welford(xs, n, mean, m2) -> (mean, m2): figures.welford, each step rounded as Python's
 * floats are (compiled with -ffp-contract=off: no fused multiply-add). */
static PyObject *welford(PyObject *self, PyObject *args) {
    Py_buffer xs;
    long long n;
    double mean, m2;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*Ldd", &xs, &n, &mean, &m2)) return NULL;
    if (n < 0 || n > (1LL << 53) || xs.len / (Py_ssize_t)sizeof(double) > (1LL << 53) - n) {
        PyBuffer_Release(&xs);  /* counts past 2**53 are not exact doubles */
        PyErr_SetString(PyExc_ValueError, "welford: a count outside 0..2**53");
        return NULL;
    }
    const double *v = (const double *)xs.buf;
    Py_ssize_t len = xs.len / (Py_ssize_t)sizeof(double);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < len; i++) {
        double d = v[i] - mean;
        mean += d / (double)(n + 1 + i);
        double e = v[i] - mean;
        m2 += d * e;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&xs);
    return Py_BuildValue("dd", mean, m2);
}

/* find_all(buf, end, needle) -> bytes: every place (int64, ascending, overlapping ones
 * too) where needle lies whole in buf[:end]; memchr for one byte, memmem for more. */
static PyObject *find_all(PyObject *self, PyObject *args) {
    Py_buffer buf, kw;
    Py_ssize_t end;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*ny*", &buf, &end, &kw)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t cap = 1024, n = 0;
    int64_t *places = NULL;
    if (end < 0 || end > buf.len || kw.len < 1) {
        PyErr_SetString(PyExc_ValueError, "find_all: bad sizes");
        goto done;
    }
    places = (int64_t *)PyMem_RawMalloc((size_t)cap * sizeof(int64_t));
    if (places == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const char *b = (const char *)buf.buf, *k = (const char *)kw.buf;
    Py_ssize_t m = kw.len;
    int grown = 1;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t at = 0;
    while (at + m <= end) {
        const char *hit = m == 1 ? memchr(b + at, k[0], (size_t)(end - at))
                                 : memmem(b + at, (size_t)(end - at), k, (size_t)m);
        if (hit == NULL) break;
        if (n == cap) {
            int64_t *more = (int64_t *)PyMem_RawRealloc(places, (size_t)cap * 2 * sizeof(int64_t));
            if (more == NULL) {
                grown = 0;
                break;
            }
            places = more;
            cap *= 2;
        }
        places[n++] = hit - b;
        at = hit - b + 1;
    }
    Py_END_ALLOW_THREADS
    if (!grown) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyBytes_FromStringAndSize((const char *)places, n * (Py_ssize_t)sizeof(int64_t));
done:
    PyMem_RawFree(places);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&kw);
    return out;
}

/* find_by(buf, end, kws, at) -> list of bytes: for each keyword kws[i], every place (int64,
 * ascending) where it lies whole in buf[:end], found from the places of its byte at[i]
 * (memchr: one pass for all the keywords that share that byte), each checked whole. */
typedef struct {
    int64_t *p;
    Py_ssize_t n, cap;
} Places;

static int places_add(Places *pl, int64_t v) {
    if (pl->n == pl->cap) {
        Py_ssize_t cap = pl->cap ? pl->cap * 2 : 1024;
        int64_t *more = (int64_t *)PyMem_RawRealloc(pl->p, (size_t)cap * sizeof(int64_t));
        if (more == NULL) return -1;
        pl->p = more;
        pl->cap = cap;
    }
    pl->p[pl->n++] = v;
    return 0;
}

#define MAX_KWS 16

static PyObject *find_by(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t end;
    PyObject *kws, *ats;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nO!O!", &buf, &end, &PyTuple_Type, &kws, &PyTuple_Type, &ats))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t nk = PyTuple_GET_SIZE(kws);
    const char *kw[MAX_KWS];
    Py_ssize_t len[MAX_KWS], at[MAX_KWS];
    Places pl[MAX_KWS];
    memset(pl, 0, sizeof pl);
    if (nk > MAX_KWS || PyTuple_GET_SIZE(ats) != nk || end < 0 || end > buf.len) {
        PyErr_SetString(PyExc_ValueError, "find_by: bad arguments");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *k = PyTuple_GET_ITEM(kws, i);
        if (!PyBytes_Check(k) || PyBytes_GET_SIZE(k) < 1) {
            PyErr_SetString(PyExc_TypeError, "find_by: keywords are non-empty bytes");
            goto done;
        }
        kw[i] = PyBytes_AS_STRING(k);
        len[i] = PyBytes_GET_SIZE(k);
        at[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(ats, i));
        if (at[i] < 0 || at[i] >= len[i]) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "find_by: bad byte index");
            goto done;
        }
    }
    const char *b = (const char *)buf.buf;
    int failed = 0, done_kw[MAX_KWS] = {0};
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nk && !failed; i++) {
        if (done_kw[i]) continue;
        char byte = kw[i][at[i]];
        /* the keywords found by this byte */
        Py_ssize_t grp[MAX_KWS], ng = 0;
        for (Py_ssize_t j = i; j < nk; j++)
            if (!done_kw[j] && kw[j][at[j]] == byte) {
                grp[ng++] = j;
                done_kw[j] = 1;
            }
        const char *p = b, *stop = b + end;
        while (p < stop && (p = memchr(p, byte, (size_t)(stop - p))) != NULL) {
            Py_ssize_t h = p - b;
            for (Py_ssize_t g = 0; g < ng; g++) {
                Py_ssize_t j = grp[g], q = h - at[j];
                if (q >= 0 && q + len[j] <= end && memcmp(b + q, kw[j], (size_t)len[j]) == 0 &&
                    places_add(&pl[j], q) < 0) {
                    failed = 1;
                    break;
                }
            }
            if (failed) break;
            p++;
        }
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    out = PyList_New(nk);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < nk; i++) {
        PyObject *o = PyBytes_FromStringAndSize((const char *)pl[i].p,
                                                pl[i].n * (Py_ssize_t)sizeof(int64_t));
        if (o == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, o);
    }
done:
    for (Py_ssize_t i = 0; i < MAX_KWS; i++) PyMem_RawFree(pl[i].p);
    PyBuffer_Release(&buf);
    return out;
}

static PyMethodDef METHODS[] = {
    {"find_by", find_by, METH_VARARGS, "Every place of each keyword, by a byte of each (int64)."},
    {"find_all", find_all, METH_VARARGS, "Every place of a needle in buf[:end] (int64)."},
    {"run", run, METH_VARARGS, "Run a compiled line template over lines (linescan.match)."},
    {"welford", welford, METH_VARARGS, "Welford's update of (mean, M2) (figures.welford)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_linescan",
                                    "linescan.match compiled (see linescan.py).", -1, METHODS,
                                    NULL, NULL, NULL, NULL};

/* The functions and argument layouts this build has; linescan.py uses the module only when
 * this is the number it expects (a module built from older sources is left unused). */
#define API 1

PyMODINIT_FUNC PyInit__linescan(void) {
    PyObject *m = PyModule_Create(&MODULE);
    if (m != NULL && PyModule_AddIntConstant(m, "API", API) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
