/*
 * Native value walker for gateway/rawjson.py: where does the JSON value at an offset end?
 *
 * `value_end(data, pos, max_int_digits=0)` returns the offset just past the JSON value
 * that starts at `pos` (object, array, string, number, true/false/null, and the NaN,
 * Infinity and -Infinity that Python's json module accepts), validating it as it goes:
 * structure, string escapes, control characters, strict UTF-8 (as Python's decoder:
 * no overlongs, no surrogates, nothing past U+10FFFF) and, when `max_int_digits` > 0, the
 * integer digit limit that Python's json enforces. Malformed input raises ValueError
 * naming the offset. So it accepts exactly what `json.JSONDecoder().raw_decode` accepts
 * on the decoded text.
 *
 * Nesting is walked with an explicit stack on the heap, never the C stack. The first
 * 64 KiB are walked holding the GIL (a short value costs no GIL round trip); a value
 * longer than that is walked again from the token it stopped at with the GIL released,
 * so a 30 MiB `messages` array never holds other threads (the event loop) back. The
 * buffer is held through a Py_buffer for the whole call, so it cannot go away or resize.
 *
 * `space_end(data, pos)` skips whitespace between members the same way (a body padded
 * with megabytes of it would otherwise hold the GIL in Python's regex).
 *
 * `splice(data, edits)` applies sorted, disjoint (start, end, bytes) edits in one copy,
 * with the GIL released when the result is over 64 KiB: slicing or joining a 30 MiB body
 * in Python holds the GIL for the whole memcpy (and its page faults).
 *
 * `children(data, pos, limit=0, object=-1)` walks the object or array at `pos` once,
 * without the GIL when the data is longer than 64 KiB, and returns where each member or
 * element lies: a bytes
 * of native int64 triples (start, value start, end); start is the key's quote for an
 * object member and the value's start for an array element. With them a caller can load
 * a large body a slice at a time. Also returned: the deepest nesting of any child (0 for
 * a scalar, 1 for `{}`), so a depth limit is checked without building anything, and
 * the offset just past the container. With a `limit` it returns that many children at
 * most and where to resume (`object` 0 or 1 then says what it resumes in), so a body of
 * millions of tiny elements never needs its offsets in memory all at once.
 *
 * `skip_children(data, pos)` gives the same triples for data already parsed as JSON,
 * skipping strings with memchr instead of validating them (~10x faster).
 *
 * `set_members(data, keys, values)` sets top-level members of a small object already
 * parsed as JSON, every other byte kept, comparing each key's bytes in C: patch_object's
 * bytes for a few fields set, without a Python step per member.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define GIL_BYTES (64 * 1024)
#define MAX_DEPTH 1000000

/* DONE: the value ended; CONTINUE: a token ended; PAUSED: stopped at `stop`, rewound to a token. */
enum { DONE = 1, PAUSED = 0, FAILED = -1, CONTINUE = 2 };
enum { ST_VALUE, ST_VALUE_OR_CLOSE, ST_KEY, ST_KEY_OR_CLOSE, ST_COLON, ST_AFTER };

typedef struct {
    const unsigned char *s;
    Py_ssize_t n;
    Py_ssize_t p;
    int state;
    char *stack; /* the closer, '}' or ']', of each open container */
    Py_ssize_t depth, cap;
    Py_ssize_t max_int_digits;
    const char *err;
    Py_ssize_t err_at;
    int nomem;
} Walk;

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#define HAS_ZERO(v) (((v) - ONES) & ~(v) & HIGHS)

static int fail(Walk *w, Py_ssize_t at, const char *msg)
{
    w->err = msg;
    w->err_at = at;
    return FAILED;
}

static int is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int is_hex(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0. */
static Py_ssize_t utf8_len(const unsigned char *s, Py_ssize_t p, Py_ssize_t n)
{
    unsigned char c = s[p];
    Py_ssize_t len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0xC2)
        return 0;
    if (c < 0xE0)
        len = 2;
    else if (c < 0xF0) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    }
    else if (c < 0xF5) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    }
    else
        return 0;
    if (p + len > n || s[p + 1] < lo || s[p + 1] > hi)
        return 0;
    for (Py_ssize_t k = 2; k < len; k++)
        if ((s[p + k] & 0xC0) != 0x80)
            return 0;
    return len;
}

/* True when any of 8 bytes needs a look: '"', '\\', a control character, or non-ASCII. */
static int special8(const unsigned char *s)
{
    uint64_t x;
    memcpy(&x, s, 8);
    uint64_t quote = x ^ (ONES * '"'), slash = x ^ (ONES * '\\');
    return ((x & HIGHS) | ((x - ONES * 0x20) & ~x & HIGHS) | HAS_ZERO(quote) | HAS_ZERO(slash)) != 0;
}

/* The string whose opening quote is at w->p; stops (PAUSED) at `stop` unless stop == n. */
static int walk_string(Walk *w, Py_ssize_t stop)
{
    const unsigned char *s = w->s;
    Py_ssize_t n = w->n, p = w->p + 1;
    while (p < stop) {
        while (p + 8 <= stop && !special8(s + p))
            p += 8;
        if (p >= stop)
            break;
        unsigned char c = s[p];
        if (c == '"') {
            w->p = p + 1;
            return DONE;
        }
        if (c == '\\') {
            if (p + 1 >= n)
                break;
            unsigned char e = s[p + 1];
            if (e == 'u') {
                for (int k = 2; k < 6; k++)
                    if (p + k >= n || !is_hex(s[p + k]))
                        return fail(w, p, "bad \\u escape in string");
                p += 6;
            }
            else if (strchr("\"\\/bfnrt", e) && e)
                p += 2;
            else
                return fail(w, p, "bad escape in string");
        }
        else if (c < 0x20)
            return fail(w, p, "control character in string");
        else if (c >= 0x80) {
            Py_ssize_t len = utf8_len(s, p, n);
            if (!len)
                return fail(w, p, "invalid UTF-8");
            p += len;
        }
        else
            p++;
    }
    if (stop < n)
        return PAUSED; /* w->p still at the opening quote: walked again without the GIL */
    return fail(w, w->p, "unterminated string");
}

static Py_ssize_t digits(const unsigned char *s, Py_ssize_t p, Py_ssize_t n)
{
    while (p < n && is_digit(s[p]))
        p++;
    return p;
}

static int literal(Walk *w, const char *word)
{
    size_t len = strlen(word);
    if ((size_t)(w->n - w->p) < len || memcmp(w->s + w->p, word, len) != 0)
        return fail(w, w->p, "expected a value");
    w->p += (Py_ssize_t)len;
    return DONE;
}

/* A number as Python's json reads it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?
 * Reads stop at `stop`: a number that reaches it is walked again without the GIL. */
static int walk_number(Walk *w, Py_ssize_t stop)
{
    const unsigned char *s = w->s;
    Py_ssize_t p = w->p;
    int is_float = 0;
    if (s[p] == '-') {
        p++;
        if (p < w->n && s[p] == 'I') {
            w->p = p;
            return literal(w, "Infinity");
        }
    }
    if (p >= stop && stop < w->n)
        return PAUSED;
    if (p >= stop || !is_digit(s[p]))
        return fail(w, w->p, "expected a value");
    Py_ssize_t int_start = p;
    p = s[p] == '0' ? p + 1 : digits(s, p, stop);
    Py_ssize_t int_digits = p - int_start;
    if (p + 1 < stop && s[p] == '.' && is_digit(s[p + 1])) {
        p = digits(s, p + 1, stop);
        is_float = 1;
    }
    if (p < stop && (s[p] == 'e' || s[p] == 'E')) {
        Py_ssize_t q = p + 1;
        if (q < stop && (s[q] == '+' || s[q] == '-'))
            q++;
        if (q < stop && is_digit(s[q])) {
            p = digits(s, q, stop);
            is_float = 1;
        }
    }
    if (p + 4 >= stop && stop < w->n)
        return PAUSED; /* the number may go on past `stop` */
    if (!is_float && w->max_int_digits > 0 && int_digits > w->max_int_digits)
        return fail(w, w->p, "integer over Python's digit limit");
    w->p = p;
    return DONE;
}

static int push(Walk *w, char closer)
{
    if (w->depth >= MAX_DEPTH)
        return fail(w, w->p, "nested too deep");
    if (w->depth == w->cap) {
        Py_ssize_t cap = w->cap ? w->cap * 2 : 64;
        char *grown = PyMem_RawRealloc(w->stack, (size_t)cap);
        if (!grown) {
            w->nomem = 1;
            return fail(w, w->p, "out of memory");
        }
        w->stack = grown;
        w->cap = cap;
    }
    w->stack[w->depth++] = closer;
    w->state = closer == '}' ? ST_KEY_OR_CLOSE : ST_VALUE_OR_CLOSE;
    w->p++;
    return CONTINUE;
}

/* A value ended at w->p: the walk is done at depth 0, else a ',' or a closer follows. */
static int value_done(Walk *w)
{
    w->state = ST_AFTER;
    return w->depth == 0 ? DONE : CONTINUE;
}

static int close_container(Walk *w)
{
    w->depth--;
    w->p++;
    return value_done(w);
}

static int scalar(Walk *w, unsigned char c, Py_ssize_t stop)
{
    switch (c) {
    case '"': return walk_string(w, stop);
    case 't': return literal(w, "true");
    case 'f': return literal(w, "false");
    case 'n': return literal(w, "null");
    case 'N': return literal(w, "NaN");
    case 'I': return literal(w, "Infinity");
    default: return walk_number(w, stop);
    }
}

/* One token at w->p in w->state. */
static int step(Walk *w, unsigned char c, Py_ssize_t stop)
{
    int r;
    switch (w->state) {
    case ST_VALUE_OR_CLOSE:
        if (c == ']')
            return close_container(w);
        /* fall through */
    case ST_VALUE:
        if (c == '{' || c == '[')
            return push(w, c == '{' ? '}' : ']');
        r = scalar(w, c, stop);
        return r == DONE ? value_done(w) : r;
    case ST_KEY_OR_CLOSE:
        if (c == '}')
            return close_container(w);
        /* fall through */
    case ST_KEY:
        if (c != '"')
            return fail(w, w->p, "expected a key");
        r = walk_string(w, stop);
        if (r != DONE)
            return r;
        w->state = ST_COLON;
        return CONTINUE;
    case ST_COLON:
        if (c != ':')
            return fail(w, w->p, "expected ':'");
        w->p++;
        w->state = ST_VALUE;
        return CONTINUE;
    default: /* ST_AFTER, inside a container */
        if (c == ',') {
            w->p++;
            w->state = w->stack[w->depth - 1] == '}' ? ST_KEY : ST_VALUE;
            return CONTINUE;
        }
        if (c == w->stack[w->depth - 1])
            return close_container(w);
        return fail(w, w->p, "expected ',' or a closing bracket");
    }
}

/* Walk until the value ends (DONE), fails, or reaches `stop` (PAUSED, at a token start). */
static int walk(Walk *w, Py_ssize_t stop)
{
    for (;;) {
        if (w->depth > 0) /* the caller skips whitespace before the value itself */
            while (w->p < stop && is_ws(w->s[w->p]))
                w->p++;
        if (w->p >= w->n)
            return fail(w, w->p, "unexpected end of data");
        if (w->p >= stop)
            return PAUSED;
        int r = step(w, w->s[w->p], stop);
        if (r != CONTINUE)
            return r;
    }
}

static PyObject *value_end(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, max_int_digits = 0;
    if (!PyArg_ParseTuple(args, "y*n|n", &view, &pos, &max_int_digits))
        return NULL;
    Walk w = {view.buf, view.len, pos, ST_VALUE, NULL, 0, 0, max_int_digits, NULL, 0, 0};
    int r;
    if (pos < 0 || pos > view.len)
        r = fail(&w, pos, "offset out of range");
    else {
        Py_ssize_t stop = view.len - pos > GIL_BYTES ? pos + GIL_BYTES : view.len;
        r = walk(&w, stop);
        if (r == PAUSED) {
            Py_BEGIN_ALLOW_THREADS
            r = walk(&w, view.len);
            Py_END_ALLOW_THREADS
        }
    }
    PyMem_RawFree(w.stack);
    PyBuffer_Release(&view);
    if (r == DONE)
        return PyLong_FromSsize_t(w.p);
    if (w.nomem)
        return PyErr_NoMemory();
    PyErr_Format(PyExc_ValueError, "%s at offset %zd", w.err, w.err_at);
    return NULL;
}

/* The offset past the string whose opening quote is at p, or -1: the next quote not
 * escaped (preceded by an even run of backslashes), found with memchr. */
static Py_ssize_t skip_string(const unsigned char *s, Py_ssize_t n, Py_ssize_t p)
{
    Py_ssize_t from = p + 1;
    for (;;) {
        const unsigned char *q = memchr(s + from, '"', (size_t)(n - from));
        if (q == NULL)
            return -1;
        Py_ssize_t at = q - s, b = at;
        while (b > from && s[b - 1] == '\\')
            b--;
        if (((at - b) & 1) == 0)
            return at + 1;
        from = at + 1;
    }
}

/* The offset past the value at p in data already validated as JSON, or -1. */
static Py_ssize_t skip_value(const unsigned char *s, Py_ssize_t n, Py_ssize_t p)
{
    Py_ssize_t depth = 0;
    while (p < n) {
        unsigned char c = s[p];
        if (c == '"') {
            p = skip_string(s, n, p);
            if (p < 0 || depth == 0)
                return p;
        } else if (c == '{' || c == '[') {
            depth++;
            p++;
        } else if (c == '}' || c == ']') {
            if (--depth <= 0)
                return depth == 0 ? p + 1 : -1;
            p++;
        } else if (depth == 0) { /* a number, true, false or null */
            while (p < n && s[p] != ',' && s[p] != '}' && s[p] != ']' && !is_ws(s[p]))
                p++;
            return p;
        } else
            p++;
    }
    return -1;
}

/* skip_end(data, pos): the offset past the value at pos, for data that was already
 * parsed as JSON (so valid): strings are skipped with memchr, containers by counting
 * brackets outside them; nothing is validated, which makes it several times faster
 * than value_end. Malformed data gives ValueError or a wrong offset, never a read past
 * the buffer. Without the GIL past 64 KiB. */
static PyObject *skip_end(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end;
    if (!PyArg_ParseTuple(args, "y*n", &view, &pos))
        return NULL;
    if (pos < 0 || pos >= view.len)
        end = -1;
    else if (view.len - pos > GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        end = skip_value(view.buf, view.len, pos);
        Py_END_ALLOW_THREADS
    } else
        end = skip_value(view.buf, view.len, pos);
    PyBuffer_Release(&view);
    if (end < 0) {
        PyErr_Format(PyExc_ValueError, "no JSON value ends after offset %zd", pos);
        return NULL;
    }
    return PyLong_FromSsize_t(end);
}

/* The deepest nesting of arrays and objects in data already validated as JSON (a top-level
 * object or array is depth 1; brackets inside strings do not count), or -1 when a string
 * does not end. With `commas`, also the commas outside strings. */
static Py_ssize_t bracket_depth(const unsigned char *s, Py_ssize_t n, Py_ssize_t *commas)
{
    Py_ssize_t depth = 0, deepest = 0, p = 0, count = 0;
    while (p < n) {
        const unsigned char c = s[p];
        if (c == '"') {
            p = skip_string(s, n, p);
            if (p < 0)
                return -1;
            continue;
        }
        if (c == '{' || c == '[') {
            if (++depth > deepest)
                deepest = depth;
        } else if (c == '}' || c == ']')
            depth--;
        else if (c == ',')
            count++;
        p++;
    }
    if (commas != NULL)
        *commas = count;
    return deepest;
}

/* max_depth(data): how deep arrays and objects nest in data already parsed as JSON, by
 * counting brackets outside strings (skipped with memchr). Nothing is validated: it is an
 * upper bound on the parsed value's depth (a repeated key's dropped value counts too).
 * Without the GIL past 64 KiB. */
static PyObject *max_depth(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t deepest;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    if (view.len > GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        deepest = bracket_depth(view.buf, view.len, NULL);
        Py_END_ALLOW_THREADS
    } else
        deepest = bracket_depth(view.buf, view.len, NULL);
    PyBuffer_Release(&view);
    if (deepest < 0) {
        PyErr_SetString(PyExc_ValueError, "a JSON string does not end");
        return NULL;
    }
    return PyLong_FromSsize_t(deepest);
}

/* commas(data): the commas outside strings (strings skipped with memchr, as max_depth
 * does), in any bytes: nothing is validated, so for data that is not JSON it is only a
 * count. A string that does not end gives ValueError. Without the GIL past 64 KiB. */
static PyObject *commas(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t deepest, count = 0;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    if (view.len > GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        deepest = bracket_depth(view.buf, view.len, &count);
        Py_END_ALLOW_THREADS
    } else
        deepest = bracket_depth(view.buf, view.len, &count);
    PyBuffer_Release(&view);
    if (deepest < 0) {
        PyErr_SetString(PyExc_ValueError, "a JSON string does not end");
        return NULL;
    }
    return PyLong_FromSsize_t(count);
}

static Py_ssize_t skip_ws(const unsigned char *s, Py_ssize_t p, Py_ssize_t stop);

/* Whether the key whose quotes are at [q, e) (e just past the closing quote) is `name`. */
static int key_is(const unsigned char *s, Py_ssize_t q, Py_ssize_t e, const char *name)
{
    size_t len = strlen(name);
    return (size_t)(e - q - 2) == len && memcmp(s + q + 1, name, len) == 0;
}

/* 1 when data (already valid JSON) has, at any depth, a key cache_control or
 * prompt_cache_breakpoint, or a key content whose value is an array; 0 if none; -1 when a
 * string does not end. Strings are skipped with memchr; a string is a key when a colon
 * follows it (whitespace allowed). */
static int list_or_marker(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t p = 0;
    for (;;) {
        const unsigned char *q = memchr(s + p, '"', (size_t)(n - p));
        if (q == NULL)
            return 0;
        Py_ssize_t at = q - s, end = skip_string(s, n, at);
        if (end < 0)
            return -1;
        Py_ssize_t c = skip_ws(s, end, n);
        if (c < n && s[c] == ':') {
            if (key_is(s, at, end, "cache_control") || key_is(s, at, end, "prompt_cache_breakpoint"))
                return 1;
            if (key_is(s, at, end, "content")) {
                Py_ssize_t v = skip_ws(s, c + 1, n);
                if (v < n && s[v] == '[')
                    return 1;
            }
        }
        p = end;
    }
}

/* list_or_marker(data) -> whether data, already valid JSON, has a cache marker key or an
 * array-valued content key at any depth (~0.1 ms per MB). Without the GIL past 64 KiB. */
static PyObject *list_or_marker_py(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int found;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    if (view.len > GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        found = list_or_marker(view.buf, view.len);
        Py_END_ALLOW_THREADS
    } else
        found = list_or_marker(view.buf, view.len);
    PyBuffer_Release(&view);
    if (found < 0) {
        PyErr_SetString(PyExc_ValueError, "a JSON string does not end");
        return NULL;
    }
    return PyBool_FromLong(found);
}

/* depth_commas(data) -> (max_depth(data), commas(data)), in the one pass both make. */
static PyObject *depth_commas(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t deepest, count = 0;
    if (!PyArg_ParseTuple(args, "y*", &view))
        return NULL;
    if (view.len > GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        deepest = bracket_depth(view.buf, view.len, &count);
        Py_END_ALLOW_THREADS
    } else
        deepest = bracket_depth(view.buf, view.len, &count);
    PyBuffer_Release(&view);
    if (deepest < 0) {
        PyErr_SetString(PyExc_ValueError, "a JSON string does not end");
        return NULL;
    }
    return Py_BuildValue("(nn)", deepest, count);
}

static Py_ssize_t skip_ws(const unsigned char *s, Py_ssize_t p, Py_ssize_t stop)
{
    while (p < stop && is_ws(s[p]))
        p++;
    return p;
}

/* space_end(data, pos): the first offset from pos that is not JSON whitespace. */
static PyObject *space_end(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "y*n", &view, &pos))
        return NULL;
    const unsigned char *s = view.buf;
    Py_ssize_t n = view.len;
    pos = pos < 0 ? 0 : pos > n ? n : pos;
    Py_ssize_t stop = n - pos > GIL_BYTES ? pos + GIL_BYTES : n;
    pos = skip_ws(s, pos, stop);
    if (pos == stop && stop < n) { /* a long run (padding): the rest without the GIL */
        Py_BEGIN_ALLOW_THREADS
        pos = skip_ws(s, pos, n);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(pos);
}

/* The triples children() collects, grown on the raw heap (usable without the GIL). */
typedef struct {
    int64_t *items;
    Py_ssize_t len, cap;
} Triples;

static int add_triple(Triples *t, Py_ssize_t a, Py_ssize_t b, Py_ssize_t c)
{
    if (t->len + 3 > t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 3 * 1024;
        int64_t *grown = PyMem_RawRealloc(t->items, (size_t)cap * sizeof(int64_t));
        if (!grown)
            return -1;
        t->items = grown;
        t->cap = cap;
    }
    t->items[t->len++] = a;
    t->items[t->len++] = b;
    t->items[t->len++] = c;
    return 0;
}

/* One child value at w->p, walked to its end (DONE) with its nesting in *deepest. */
static int child_value(Walk *w, Py_ssize_t *deepest)
{
    w->state = ST_VALUE;
    w->depth = 0;
    Py_ssize_t most = 0;
    for (;;) {
        if (w->depth > 0)
            while (w->p < w->n && is_ws(w->s[w->p]))
                w->p++;
        if (w->p >= w->n)
            return fail(w, w->p, "unexpected end of data");
        int r = step(w, w->s[w->p], w->n);
        if (w->depth > most)
            most = w->depth;
        if (r != CONTINUE) {
            if (most > *deepest)
                *deepest = most;
            return r;
        }
    }
}

/* Walk the container at w->p, or (object >= 0) resume inside one just after a child:
 * each child's (start, value start, end) into t. At `limit` children (0: no limit) it
 * stops (PAUSED) with w->p just after the last child, where a later call resumes. */
static int walk_children(Walk *w, Triples *t, Py_ssize_t *deepest, Py_ssize_t limit, int object)
{
    const unsigned char *s = w->s;
    Py_ssize_t n = w->n, p;
    if (object < 0) {
        if (w->p >= n || (s[w->p] != '{' && s[w->p] != '['))
            return fail(w, w->p, "expected an object or an array");
        object = s[w->p] == '{';
        p = skip_ws(s, w->p + 1, n);
        if (p < n && s[p] == (object ? '}' : ']')) {
            w->p = p + 1;
            return DONE;
        }
    }
    else {
        p = skip_ws(s, w->p, n);
        if (p < n && s[p] == (object ? '}' : ']')) {
            w->p = p + 1;
            return DONE;
        }
        if (p >= n || s[p] != ',')
            return fail(w, p, "expected ',' or a closing bracket");
        p = skip_ws(s, p + 1, n);
    }
    unsigned char closer = object ? '}' : ']';
    for (;;) {
        Py_ssize_t start = p, value_start = p;
        if (object) {
            if (p >= n || s[p] != '"')
                return fail(w, p, "expected a key");
            w->p = p;
            if (walk_string(w, n) != DONE)
                return FAILED;
            p = skip_ws(s, w->p, n);
            if (p >= n || s[p] != ':')
                return fail(w, p, "expected ':'");
            value_start = p = skip_ws(s, p + 1, n);
        }
        w->p = p;
        if (child_value(w, deepest) != DONE)
            return FAILED;
        if (add_triple(t, start, value_start, w->p) < 0) {
            w->nomem = 1;
            return fail(w, p, "out of memory");
        }
        Py_ssize_t child_end = w->p;
        p = skip_ws(s, child_end, n);
        if (p < n && s[p] == closer) {
            w->p = p + 1;
            return DONE;
        }
        if (p >= n || s[p] != ',')
            return fail(w, p, "expected ',' or a closing bracket");
        if (limit > 0 && t->len / 3 >= limit) {
            w->p = child_end;
            return PAUSED;
        }
        p = skip_ws(s, p + 1, n);
    }
}

/* children(data, pos, limit=0, object=-1) -> (bytes of int64 triples, deepest nesting of
 * a child, next offset, done). With object -1, pos is the container's opening bracket;
 * with 0 (array) or 1 (object), pos is where an earlier call stopped. Done: next is just
 * past the container; not done (`limit` children returned): next is where to resume. */
static PyObject *children(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, limit = 0;
    int object = -1;
    if (!PyArg_ParseTuple(args, "y*n|ni", &view, &pos, &limit, &object))
        return NULL;
    Walk w = {view.buf, view.len, pos, ST_VALUE, NULL, 0, 0, 0, NULL, 0, 0};
    Triples t = {NULL, 0, 0};
    Py_ssize_t deepest = 0;
    int r;
    if (pos < 0 || pos > view.len)
        r = fail(&w, pos, "offset out of range");
    else if (view.len - pos > GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        r = walk_children(&w, &t, &deepest, limit, object);
        Py_END_ALLOW_THREADS
    }
    else
        r = walk_children(&w, &t, &deepest, limit, object);
    PyObject *result = NULL;
    if (r == DONE || r == PAUSED) {
        PyObject *triples = PyBytes_FromStringAndSize((const char *)t.items, (Py_ssize_t)(t.len * sizeof(int64_t)));
        if (triples)
            result = Py_BuildValue("(NnnO)", triples, deepest, w.p, r == DONE ? Py_True : Py_False);
    }
    else if (w.nomem)
        PyErr_NoMemory();
    else
        PyErr_Format(PyExc_ValueError, "%s at offset %zd", w.err, w.err_at);
    PyMem_RawFree(w.stack);
    PyMem_RawFree(t.items);
    PyBuffer_Release(&view);
    return result;
}

/* Each child of the container at p in data already validated as JSON, as (start, value
 * start, end) triples into t, values skipped as skip_value does; the offset past the
 * container, or -1 (malformed: never a read past the buffer). */
static Py_ssize_t skip_children_at(const unsigned char *s, Py_ssize_t n, Py_ssize_t p, Triples *t,
                                   int object, int *nomem)
{
    if (object < 0) {
        if (p >= n || (s[p] != '{' && s[p] != '['))
            return -1;
        object = s[p] == '{';
        p = skip_ws(s, p + 1, n);
        if (p < n && s[p] == (object ? '}' : ']'))
            return p + 1;
    } else { /* resumed just after a child */
        p = skip_ws(s, p, n);
        if (p < n && s[p] == (object ? '}' : ']'))
            return p + 1;
        if (p >= n || s[p] != ',')
            return -1;
        p = skip_ws(s, p + 1, n);
    }
    unsigned char closer = object ? '}' : ']';
    for (;;) {
        Py_ssize_t start = p, value_start = p;
        if (object) {
            if (p >= n || s[p] != '"')
                return -1;
            p = skip_string(s, n, p);
            if (p < 0)
                return -1;
            p = skip_ws(s, p, n);
            if (p >= n || s[p] != ':')
                return -1;
            value_start = p = skip_ws(s, p + 1, n);
        }
        if (p >= n || s[p] == ',' || s[p] == closer)
            return -1;
        Py_ssize_t end = skip_value(s, n, p);
        if (end < 0 || end == p)
            return -1;
        if (add_triple(t, start, value_start, end) < 0) {
            *nomem = 1;
            return -1;
        }
        p = skip_ws(s, end, n);
        if (p < n && s[p] == closer)
            return p + 1;
        if (p >= n || s[p] != ',')
            return -1;
        p = skip_ws(s, p + 1, n);
    }
}

/* skip_children(data, pos, object=-1) -> (bytes of int64 triples, next): what
 * children(data, pos, 0, object) returns, for data that was already parsed as JSON
 * (orjson's own output, a body parsed before): strings are skipped with memchr and
 * nothing is validated, ~10x faster than the validating walk. With object -1, pos is the
 * container's opening bracket; with 0 (array) or 1 (object), pos is just after one of
 * its children. Malformed data gives ValueError or wrong offsets, never a read past the
 * buffer. Without the GIL past 64 KiB. */
static PyObject *skip_children(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end = -1;
    int nomem = 0, object = -1;
    if (!PyArg_ParseTuple(args, "y*n|i", &view, &pos, &object))
        return NULL;
    Triples t = {NULL, 0, 0};
    if (pos >= 0 && pos <= view.len && object >= -1 && object <= 1) {
        if (view.len - pos > GIL_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            end = skip_children_at(view.buf, view.len, pos, &t, object, &nomem);
            Py_END_ALLOW_THREADS
        } else
            end = skip_children_at(view.buf, view.len, pos, &t, object, &nomem);
    }
    PyObject *result = NULL;
    if (end >= 0) {
        PyObject *triples = PyBytes_FromStringAndSize((const char *)t.items, (Py_ssize_t)(t.len * sizeof(int64_t)));
        if (triples)
            result = Py_BuildValue("(Nn)", triples, end);
    }
    else if (nomem)
        PyErr_NoMemory();
    else
        PyErr_Format(PyExc_ValueError, "no JSON object or array ends after offset %zd", pos);
    PyMem_RawFree(t.items);
    PyBuffer_Release(&view);
    return result;
}

/* The index in `keys` (a tuple of bytes) of the key written at s[q + 1 .. e - 1], or -1. */
static Py_ssize_t key_index(PyObject *keys, const unsigned char *s, Py_ssize_t q, Py_ssize_t e)
{
    Py_ssize_t len = e - q - 2;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(keys); i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        if (PyBytes_GET_SIZE(key) == len && memcmp(PyBytes_AS_STRING(key), s + q + 1, (size_t)len) == 0)
            return i;
    }
    return -1;
}

#define MAX_SET_SPANS 64

/* One member's value to replace: where it lies and which key's value replaces it. */
typedef struct {
    Py_ssize_t start, end, index;
} SetSpan;

/* The top-level members of the object in s (already valid JSON) whose key is one of
 * `keys`, into spans (in document order), and the offset of the closing brace and the
 * member count. The span count, or -1 where the caller must decode the keys itself: a key
 * written with an escape (its bytes are not its text), more than MAX_SET_SPANS matches,
 * not an object. */
static Py_ssize_t find_members(const unsigned char *s, Py_ssize_t n, PyObject *keys,
                               SetSpan *spans, Py_ssize_t *close, Py_ssize_t *members)
{
    Py_ssize_t p = skip_ws(s, 0, n), count = 0;
    if (p >= n || s[p] != '{')
        return -1;
    p = skip_ws(s, p + 1, n);
    *members = 0;
    if (p < n && s[p] == '}') {
        *close = p;
        return 0;
    }
    for (;;) {
        if (p >= n || s[p] != '"')
            return -1;
        Py_ssize_t key_end = skip_string(s, n, p);
        if (key_end < 0 || memchr(s + p + 1, '\\', (size_t)(key_end - p - 2)) != NULL)
            return -1;
        Py_ssize_t colon = skip_ws(s, key_end, n);
        if (colon >= n || s[colon] != ':')
            return -1;
        Py_ssize_t start = skip_ws(s, colon + 1, n);
        if (start >= n || s[start] == ',' || s[start] == '}' || s[start] == ']')
            return -1;
        Py_ssize_t end = skip_value(s, n, start);
        if (end <= start)
            return -1;
        (*members)++;
        Py_ssize_t index = key_index(keys, s, p, key_end);
        if (index >= 0) {
            if (count == MAX_SET_SPANS)
                return -1;
            spans[count++] = (SetSpan){start, end, index};
        }
        p = skip_ws(s, end, n);
        if (p < n && s[p] == '}') {
            *close = p;
            return count;
        }
        if (p >= n || s[p] != ',')
            return -1;
        p = skip_ws(s, p + 1, n);
    }
}

/* Whether `key` is written the same with and without json.dumps' ASCII escaping:
 * printable ASCII, no quote, no backslash. */
static int plain_key(PyObject *key)
{
    const unsigned char *k = (const unsigned char *)PyBytes_AS_STRING(key);
    for (Py_ssize_t i = 0; i < PyBytes_GET_SIZE(key); i++)
        if (k[i] < 0x20 || k[i] > 0x7e || k[i] == '"' || k[i] == '\\')
            return 0;
    return 1;
}

/* set_members(data, keys, values) -> bytes or None: data, a small JSON object already
 * parsed (valid JSON), with the value of each top-level member whose key is keys[i] (a
 * tuple of bytes, each a key's UTF-8) replaced by values[i] (rendered JSON, bytes), and
 * each key not there appended before the closing brace as `,"key":value`, in keys'
 * order: the bytes rawjson.patch_object(data, {key: value}) gives, every other byte kept.
 * None where it cannot be sure of them: a member's key written with an escape (compared
 * as bytes it would not match), a new key patch_object would escape (not printable
 * ASCII, a quote or a backslash), data not an object. Strings are skipped with memchr,
 * nothing is validated; it holds the GIL throughout (for small bodies). */
static PyObject *set_members(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *keys, *values, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*O!O!", &view, &PyTuple_Type, &keys, &PyTuple_Type, &values))
        return NULL;
    Py_ssize_t nkeys = PyTuple_GET_SIZE(keys);
    if (PyTuple_GET_SIZE(values) != nkeys || nkeys > MAX_SET_SPANS) {
        PyErr_SetString(PyExc_ValueError, "keys and values must pair up, at most 64");
        goto done;
    }
    for (Py_ssize_t i = 0; i < nkeys; i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(keys, i)) || !PyBytes_Check(PyTuple_GET_ITEM(values, i))) {
            PyErr_SetString(PyExc_TypeError, "keys and values must be bytes");
            goto done;
        }
    }
    const char *s = view.buf;
    SetSpan spans[MAX_SET_SPANS];
    char present[MAX_SET_SPANS] = {0};
    Py_ssize_t close = 0, members = 0;
    Py_ssize_t count = find_members(view.buf, view.len, keys, spans, &close, &members);
    if (count < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t total = view.len, appended = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        present[spans[i].index] = 1;
        total += PyBytes_GET_SIZE(PyTuple_GET_ITEM(values, spans[i].index)) - (spans[i].end - spans[i].start);
    }
    for (Py_ssize_t i = 0; i < nkeys; i++) {
        if (present[i])
            continue;
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        if (!plain_key(key)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        /* `,"key":value`; no comma before the first member of an empty object */
        total += (members + appended > 0) + PyBytes_GET_SIZE(key) + 3 +
                 PyBytes_GET_SIZE(PyTuple_GET_ITEM(values, i));
        appended++;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL)
        goto done;
    char *out = PyBytes_AS_STRING(result);
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *value = PyTuple_GET_ITEM(values, spans[i].index);
        memcpy(out, s + pos, (size_t)(spans[i].start - pos));
        out += spans[i].start - pos;
        memcpy(out, PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value));
        out += PyBytes_GET_SIZE(value);
        pos = spans[i].end;
    }
    memcpy(out, s + pos, (size_t)(close - pos));
    out += close - pos;
    appended = 0;
    for (Py_ssize_t i = 0; i < nkeys; i++) {
        if (present[i])
            continue;
        PyObject *key = PyTuple_GET_ITEM(keys, i), *value = PyTuple_GET_ITEM(values, i);
        if (members + appended++ > 0)
            *out++ = ',';
        *out++ = '"';
        memcpy(out, PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key));
        out += PyBytes_GET_SIZE(key);
        *out++ = '"';
        *out++ = ':';
        memcpy(out, PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value));
        out += PyBytes_GET_SIZE(value);
    }
    memcpy(out, s + close, (size_t)(view.len - close));
done:
    PyBuffer_Release(&view);
    return result;
}

/* The parts of splice(): spans of the original and the replacements between them. */
typedef struct {
    const char *buf;
    Py_ssize_t len;
} Part;

static int add_part(Part *parts, Py_ssize_t *count, Py_ssize_t *total, const char *buf, Py_ssize_t len)
{
    if (len > PY_SSIZE_T_MAX - *total) {
        PyErr_SetString(PyExc_OverflowError, "spliced body too large");
        return -1;
    }
    parts[(*count)++] = (Part){buf, len};
    *total += len;
    return 0;
}

/* Gather the parts; each edit a (start, end, bytes) tuple, sorted and not overlapping. */
static int gather(Py_buffer *view, PyObject *edits, Part *parts, Py_ssize_t *count, Py_ssize_t *total)
{
    Py_ssize_t pos = 0, n = PyTuple_GET_SIZE(edits);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t start, end;
        PyObject *replacement;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(edits, i), "nnS", &start, &end, &replacement))
            return -1;
        if (start < pos || end < start || end > view->len) {
            PyErr_SetString(PyExc_ValueError, "edits out of order, overlapping or out of range");
            return -1;
        }
        if (add_part(parts, count, total, (const char *)view->buf + pos, start - pos) < 0 ||
            add_part(parts, count, total, PyBytes_AS_STRING(replacement), PyBytes_GET_SIZE(replacement)) < 0)
            return -1;
        pos = end;
    }
    return add_part(parts, count, total, (const char *)view->buf + pos, view->len - pos);
}

static PyObject *splice(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *edits, *held, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*O!", &view, &PyList_Type, &edits))
        return NULL;
    /* A private tuple keeps the replacements alive while the GIL is released. */
    held = PyList_AsTuple(edits);
    Part *parts = held ? PyMem_Malloc(sizeof(Part) * (2 * (size_t)PyTuple_GET_SIZE(held) + 1)) : NULL;
    Py_ssize_t count = 0, total = 0;
    if (held && !parts)
        PyErr_NoMemory();
    if (parts && gather(&view, held, parts, &count, &total) == 0)
        result = PyBytes_FromStringAndSize(NULL, total);
    if (result) {
        char *out = PyBytes_AS_STRING(result);
        int release = total > GIL_BYTES;
        PyThreadState *save = release ? PyEval_SaveThread() : NULL;
        for (Py_ssize_t i = 0; i < count; out += parts[i].len, i++)
            memcpy(out, parts[i].buf, (size_t)parts[i].len);
        if (release)
            PyEval_RestoreThread(save);
    }
    PyMem_Free(parts);
    Py_XDECREF(held);
    PyBuffer_Release(&view);
    return result;
}

/* The code point of the \uXXXX escape at p (p[0] == 'u'), or -1 if it is not one. */
static long hex4(const unsigned char *p, const unsigned char *stop)
{
    if (stop - p < 5)
        return -1;
    long value = 0;
    for (int i = 1; i <= 4; i++) {
        unsigned char c = p[i];
        int digit = c >= '0' && c <= '9' ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (digit < 0)
            return -1;
        value = value * 16 + digit;
    }
    return value;
}

/* Decode the inside of a JSON string, p..stop (no quotes). With `data` NULL it only
 * counts the code points into *count and the largest into *maxchar; else it writes them
 * into `data` of `kind`. Returns 0, or -1 for anything it does not decode exactly as
 * orjson does (a lone surrogate escape, a control character, invalid UTF-8): the caller
 * then asks orjson, which gives its own answer. Touches no Python object: runs without
 * the GIL. */
static int decode_string(const unsigned char *p, const unsigned char *stop, int kind, void *data,
                         Py_ssize_t *count, Py_UCS4 *maxchar)
{
    Py_ssize_t n = 0;
    Py_UCS4 most = 0;
    while (p < stop) {
        Py_UCS4 cp;
        unsigned char c = *p;
        if (c >= 0x20 && c < 0x80 && c != '\\' && c != '"') {
            cp = c;
            p++;
        }
        else if (c == '\\') {
            if (stop - p < 2)
                return -1;
            unsigned char e = p[1];
            if (e == 'u') {
                long unit = hex4(p + 1, stop);
                if (unit < 0)
                    return -1;
                p += 6;
                if (unit >= 0xDC00 && unit <= 0xDFFF)
                    return -1;
                if (unit >= 0xD800 && unit <= 0xDBFF) {
                    if (stop - p < 6 || p[0] != '\\')
                        return -1;
                    long low = hex4(p + 1, stop);
                    if (low < 0xDC00 || low > 0xDFFF)
                        return -1;
                    p += 6;
                    unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
                }
                cp = (Py_UCS4)unit;
            }
            else {
                switch (e) {
                case '"': cp = '"'; break;
                case '\\': cp = '\\'; break;
                case '/': cp = '/'; break;
                case 'b': cp = '\b'; break;
                case 'f': cp = '\f'; break;
                case 'n': cp = '\n'; break;
                case 'r': cp = '\r'; break;
                case 't': cp = '\t'; break;
                default: return -1;
                }
                p += 2;
            }
        }
        else if (c < 0x80) {
            return -1; /* a control character or an unescaped quote */
        }
        else {
            int len;
            if (c >= 0xC2 && c <= 0xDF) {
                len = 2;
                cp = c & 0x1F;
            }
            else if (c >= 0xE0 && c <= 0xEF) {
                len = 3;
                cp = c & 0x0F;
            }
            else if (c >= 0xF0 && c <= 0xF4) {
                len = 4;
                cp = c & 0x07;
            }
            else
                return -1;
            if (stop - p < len)
                return -1;
            for (int i = 1; i < len; i++) {
                if ((p[i] & 0xC0) != 0x80)
                    return -1;
                cp = (cp << 6) | (p[i] & 0x3F);
            }
            /* No overlongs, no surrogates, nothing past U+10FFFF (strict UTF-8). */
            if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                (cp >= 0xD800 && cp <= 0xDFFF))
                return -1;
            p += len;
        }
        if (data != NULL)
            PyUnicode_WRITE(kind, data, n, cp);
        if (cp > most)
            most = cp;
        n++;
    }
    *count = n;
    *maxchar = most;
    return 0;
}

/* string_value(data, start, end) -> the str of the JSON string at data[start:end] (its
 * quotes included), or None where orjson must decide (see decode_string). Over 64 KiB the
 * two passes run without the GIL: orjson holds it throughout, ~35 ms for 30 MiB, and the
 * page faults of the new string's memory come on top. */
static PyObject *string_value(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &end))
        return NULL;
    const unsigned char *s = view.buf;
    if (start < 0 || end > view.len || end - start < 2 || s[start] != '"' || s[end - 1] != '"') {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "not a JSON string span");
        return NULL;
    }
    const unsigned char *p = s + start + 1, *stop = s + end - 1;
    int release = end - start > GIL_BYTES, r;
    Py_ssize_t count = 0, written = 0;
    Py_UCS4 maxchar = 0, most = 0;
    if (release) {
        Py_BEGIN_ALLOW_THREADS
        r = decode_string(p, stop, 0, NULL, &count, &maxchar);
        Py_END_ALLOW_THREADS
    }
    else
        r = decode_string(p, stop, 0, NULL, &count, &maxchar);
    PyObject *result = NULL;
    if (r < 0)
        result = Py_NewRef(Py_None);
    else if ((result = PyUnicode_New(count, maxchar)) != NULL) {
        int kind = PyUnicode_KIND(result);
        void *data = PyUnicode_DATA(result);
        if (release) {
            Py_BEGIN_ALLOW_THREADS
            r = decode_string(p, stop, kind, data, &written, &most);
            Py_END_ALLOW_THREADS
        }
        else
            r = decode_string(p, stop, kind, data, &written, &most);
        if (r < 0 || written != count) { /* cannot happen: the same bytes, walked again */
            Py_CLEAR(result);
            PyErr_SetString(PyExc_SystemError, "string_value: second pass disagrees");
        }
    }
    PyBuffer_Release(&view);
    return result;
}

/* The JSON text of code point cp as orjson writes it, into out (NULL: only its length).
 * orjson escapes the quote, the backslash and the control characters (\b \t \n \f \r by
 * name, the others as \u00xx), and writes everything else as UTF-8. */
static Py_ssize_t encode_char(Py_UCS4 cp, unsigned char *out)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char buf[6];
    unsigned char *o = out ? out : buf;
    if (cp == '"' || cp == '\\') {
        o[0] = '\\';
        o[1] = (unsigned char)cp;
        return 2;
    }
    if (cp < 0x20) {
        const char *named = cp == '\b' ? "b" : cp == '\t' ? "t" : cp == '\n' ? "n"
                            : cp == '\f' ? "f" : cp == '\r' ? "r" : NULL;
        o[0] = '\\';
        if (named) {
            o[1] = (unsigned char)named[0];
            return 2;
        }
        o[1] = 'u'; o[2] = '0'; o[3] = '0';
        o[4] = (unsigned char)hex[cp >> 4];
        o[5] = (unsigned char)hex[cp & 15];
        return 6;
    }
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The JSON length of the str data (quotes included), or -1 for a surrogate code point
 * (orjson refuses those). With `out`, writes it there. Touches no Python object. */
static Py_ssize_t encode_string(int kind, const void *data, Py_ssize_t n, unsigned char *out)
{
    Py_ssize_t total = 2;
    if (out)
        *out++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 cp = PyUnicode_READ(kind, data, i);
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return -1;
        Py_ssize_t len = encode_char(cp, out);
        total += len;
        if (out)
            out += len;
    }
    if (out)
        *out = '"';
    return total;
}

/* json_string(text) -> the bytes orjson.dumps(text) gives, or None for a str holding a
 * surrogate (orjson refuses it: ask it for its error). Over 64 KiB both passes run
 * without the GIL, page faults of the new bytes included: orjson holds it throughout
 * (~20 ms for 30 MiB, as long again for slicing its output). */
static PyObject *json_string(PyObject *self, PyObject *text)
{
    (void)self;
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "json_string expects a str");
        return NULL;
    }
    if (PyUnicode_READY(text) < 0)
        return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), total, written;
    int release = n > GIL_BYTES;
    if (release) {
        Py_BEGIN_ALLOW_THREADS
        total = encode_string(kind, data, n, NULL);
        Py_END_ALLOW_THREADS
    }
    else
        total = encode_string(kind, data, n, NULL);
    if (total < 0)
        Py_RETURN_NONE;
    PyObject *result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL)
        return NULL;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(result);
    if (release) {
        Py_BEGIN_ALLOW_THREADS
        written = encode_string(kind, data, n, out);
        Py_END_ALLOW_THREADS
    }
    else
        written = encode_string(kind, data, n, out);
    if (written != total) { /* cannot happen: the same str, walked again */
        Py_DECREF(result);
        PyErr_SetString(PyExc_SystemError, "json_string: second pass disagrees");
        return NULL;
    }
    return result;
}

/* plain_messages(messages, roles) -> whether `messages` is a list of chat messages that
 * validate as themselves (gateway/pipeline/parse.py, `Message`): each an exact dict whose
 * "role" is an exact str in the set `roles` and whose "content" is absent, None, an exact
 * str or an exact list of exact dicts. Other keys are anything. One C loop over values
 * orjson made (~20 ns a message, against ~0.3 us in Python); no object is created. */
static PyObject *plain_messages(PyObject *self, PyObject *args)
{
    static PyObject *role_key = NULL, *content_key = NULL;
    PyObject *messages, *roles;
    if (!PyArg_ParseTuple(args, "OO", &messages, &roles))
        return NULL;
    if (!PyAnySet_Check(roles)) {
        PyErr_SetString(PyExc_TypeError, "plain_messages: roles must be a set or frozenset");
        return NULL;
    }
    if (role_key == NULL) {
        role_key = PyUnicode_InternFromString("role");
        content_key = PyUnicode_InternFromString("content");
        if (role_key == NULL || content_key == NULL)
            return NULL;
    }
    if (!PyList_CheckExact(messages))
        Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(messages); i++) {
        PyObject *message = PyList_GET_ITEM(messages, i);
        if (!PyDict_CheckExact(message))
            Py_RETURN_FALSE;
        PyObject *role = PyDict_GetItemWithError(message, role_key); /* borrowed */
        if (role == NULL) {
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_FALSE;
        }
        if (!PyUnicode_CheckExact(role))
            Py_RETURN_FALSE;
        int known = PySet_Contains(roles, role);
        if (known < 0)
            return NULL;
        if (!known)
            Py_RETURN_FALSE;
        PyObject *content = PyDict_GetItemWithError(message, content_key);
        if (content == NULL) {
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
        if (content == Py_None || PyUnicode_CheckExact(content))
            continue;
        if (!PyList_CheckExact(content))
            Py_RETURN_FALSE;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(content); j++)
            if (!PyDict_CheckExact(PyList_GET_ITEM(content, j)))
                Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"plain_messages", plain_messages, METH_VARARGS,
     "plain_messages(messages, roles) -> whether each message validates as itself."},
    {"json_string", json_string, METH_O,
     "json_string(text) -> the bytes orjson.dumps(text) gives, or None (a surrogate)"},
    {"string_value", string_value, METH_VARARGS,
     "string_value(data, start, end) -> the str of the JSON string there, or None"},
    {"children", children, METH_VARARGS,
     "children(data, pos, limit=0, object=-1) -> (int64 triples as bytes, deepest, next, done)."},
    {"skip_children", skip_children, METH_VARARGS,
     "skip_children(data, pos, object=-1) -> (int64 triples as bytes, next), in valid JSON."},
    {"space_end", space_end, METH_VARARGS,
     "space_end(data, pos) -> the first offset from pos that is not JSON whitespace."},
    {"set_members", set_members, METH_VARARGS,
     "set_members(data, keys, values) -> data with those top-level members set, or None."},
    {"splice", splice, METH_VARARGS,
     "splice(data, edits) -> data with each (start, end, bytes) edit applied; sorted, disjoint."},
    {"list_or_marker", list_or_marker_py, METH_VARARGS,
     "list_or_marker(data) -> whether valid JSON data has a cache marker or list content key."},
    {"depth_commas", depth_commas, METH_VARARGS,
     "depth_commas(data) -> (max_depth(data), commas(data)), in one pass."},
    {"commas", commas, METH_VARARGS,
     "commas(data) -> the commas outside JSON strings in data."},
    {"max_depth", max_depth, METH_VARARGS,
     "max_depth(data) -> how deep arrays and objects nest in data already valid JSON."},
    {"skip_end", skip_end, METH_VARARGS,
     "skip_end(data, pos) -> the offset past the value at pos, in data already valid JSON."},
    {"value_end", value_end, METH_VARARGS,
     "value_end(data, pos, max_int_digits=0) -> the offset just past the JSON value at pos."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rawjson", NULL, -1, methods};

PyMODINIT_FUNC PyInit__rawjson(void)
{
    return PyModule_Create(&module);
}
