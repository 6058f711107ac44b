/*
 * Native locator for the volatile-content scan (gateway/prefix/locate.py).
 *
 * Python's regex engine tries the candidate pattern at every digit-run start, ~300 ns a
 * try, so a digit-dense megabyte costs 10-50 ms. This loop finds, at ~1 ns a byte, the
 * digit-run starts where the pattern *could* match, by checking the few bytes each branch
 * of `patterns.CANDIDATES` needs right after (and, for long tokens, right before) the
 * anchor digit. Python's regex then confirms each such position, so the hits are exactly
 * those of the pure-Python scan; tests/unit/prefix/test_prefix_locate.py holds the two
 * side by side. Keep the conditions below a superset of the pattern's branches (the one
 * exception, bare_number, skips only matches that classify() always rejects).
 *
 * Reads stay inside the buffer: every forward read is checked against `limit` (never
 * past the buffer's end), every backward read against 0.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifndef _WIN32
#include <dlfcn.h>
#endif
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define DIGIT 1
#define TOKEN 2
#define RELEASE_GIL_BYTES (64 * 1024)

static unsigned char CLASS[256];

static void init_classes(void)
{
    for (int c = '0'; c <= '9'; c++)
        CLASS[c] = DIGIT | TOKEN;
    for (int c = 'A'; c <= 'Z'; c++)
        CLASS[c] = TOKEN;
    for (int c = 'a'; c <= 'z'; c++)
        CLASS[c] = TOKEN;
    CLASS['_'] = CLASS['+'] = CLASS['/'] = CLASS['='] = CLASS['-'] = TOKEN;
}

#define IS_DIGIT(c) (CLASS[(unsigned char)(c)] & DIGIT)
#define IS_TOKEN(c) (CLASS[(unsigned char)(c)] & TOKEN)

/* Digits from i on, at most `max`, not reading at or past `limit`. */
static Py_ssize_t digit_run(const unsigned char *s, Py_ssize_t i, Py_ssize_t limit, Py_ssize_t max)
{
    Py_ssize_t n = 0;
    while (n < max && i + n < limit && IS_DIGIT(s[i + n]))
        n++;
    return n;
}

static int byte_at(const unsigned char *s, Py_ssize_t i, Py_ssize_t limit, unsigned char c)
{
    return i < limit && s[i] == c;
}

/* tok: "(?<=T{12}[0-9])", twelve token characters right before the digit. */
static int token_before(const unsigned char *s, Py_ssize_t p)
{
    if (p < 12)
        return 0;
    for (Py_ssize_t k = p - 1; k >= p - 12; k--)
        if (!IS_TOKEN(s[k]))
            return 0;
    return 1;
}

/* tok: "T{6,}", six token characters right after the digit. */
static int token_after(const unsigned char *s, Py_ssize_t p, Py_ssize_t limit)
{
    if (p + 6 >= limit)
        return 0;
    for (Py_ssize_t k = p + 1; k <= p + 6; k++)
        if (!IS_TOKEN(s[k]))
            return 0;
    return 1;
}

/* dmy: after "d" or "dd", "SEP m[m] SEP (19|20)yy" with the same separator twice. */
static int day_month_year(const unsigned char *s, Py_ssize_t q, Py_ssize_t limit)
{
    unsigned char sep = s[q];
    Py_ssize_t month = digit_run(s, q + 1, limit, 3);
    if (month < 1 || month > 2 || !byte_at(s, q + 1 + month, limit, sep))
        return 0;
    Py_ssize_t y = q + 2 + month;
    if (y + 3 >= limit)
        return 0;
    int century = (s[y] == '1' && s[y + 1] == '9') || (s[y] == '2' && s[y + 1] == '0');
    return century && IS_DIGIT(s[y + 2]) && IS_DIGIT(s[y + 3]);
}

static int ordinal(unsigned char a, unsigned char b)
{
    return (a == 's' && b == 't') || (a == 'n' && b == 'd') || (a == 'r' && b == 'd') ||
           (a == 't' && b == 'h');
}

/* dlong and mlong: "[ORD][,] " then "of ", a month's initial or a year's 1/2. */
static int long_date(const unsigned char *s, Py_ssize_t q, Py_ssize_t limit)
{
    Py_ssize_t r = q;
    if (r + 1 < limit && ordinal(s[r], s[r + 1]))
        r += 2;
    if (byte_at(s, r, limit, ','))
        r++;
    if (!byte_at(s, r, limit, ' ') || r + 1 >= limit)
        return 0;
    unsigned char c = s[r + 1];
    return c == 'o' || c == '1' || c == '2' || (c != 0 && strchr("JFMASOND", c) != NULL);
}

/* Whether `word` (lowercase) starts at k and ends before `to`, ignoring ASCII case. */
static int word_at(const unsigned char *s, Py_ssize_t k, Py_ssize_t to, const char *word)
{
    Py_ssize_t j = 0;
    for (; word[j] != 0; j++)
        if (k + j >= to || (s[k + j] | 0x20) != (unsigned char)word[j])
            return 0;
    return 1;
}

/* A superset of patterns._TIME_CONTEXT in the 32 bytes before an epoch: "date",
 * "created", "updated" and "iat" all contain "at", and "expir" contains "exp". */
static const char *const TIME_WORDS[] = {"at",    "time",  "now", "epoch", "modified", "issued",
                                         "since", "until", "ts",  "nbf",   "exp",      NULL};
#define LONGEST_TIME_WORD 8
static unsigned char TIME_FIRST[256]; /* some time word starts with this byte (either case) */

static void init_time_first(void)
{
    for (const char *const *w = TIME_WORDS; *w != NULL; w++) {
        TIME_FIRST[(unsigned char)(*w)[0]] = 1;
        TIME_FIRST[(unsigned char)(*w)[0] & ~0x20] = 1; /* the upper-case letter */
    }
}

/*
 * Where a time word was last seen before the positions asked about, which only grow
 * within one scan: each byte is examined a bounded number of times, not once per number
 * (a megabyte of numbers asks ~65,000 times).
 */
typedef struct {
    Py_ssize_t upto; /* word starts below upto - LONGEST_TIME_WORD have been examined */
    Py_ssize_t last; /* the latest start of a time word seen, or -1 */
} TimeTrail;

static int time_word_within(TimeTrail *trail, const unsigned char *s, Py_ssize_t p,
                            Py_ssize_t window)
{
    Py_ssize_t from = p - window > 0 ? p - window : 0;
    Py_ssize_t k = trail->upto - LONGEST_TIME_WORD;
    if (k < from)
        k = from;
    for (; k < p; k++) {
        if (!TIME_FIRST[s[k]])
            continue;
        for (const char *const *w = TIME_WORDS; *w != NULL; w++)
            if (word_at(s, k, p, *w)) {
                trail->last = k;
                break;
            }
    }
    trail->upto = p;
    return trail->last >= from;
}

static int id_glue(unsigned char c)
{
    return c == '"' || c == '\'' || c == '\\' || c == ':' || c == '=' || c == ' ' ||
           (c >= '\t' && c <= '\r');
}

static int lower_is(unsigned char c, char letter)
{
    return (c | 0x20) == (unsigned char)letter;
}

/*
 * Whether "id" or "key" ends right before p but for quotes, spaces, ':' and '=', inside
 * the 48 bytes (_LOOKBACK) before it: a superset of patterns._ID_CONTEXT, which ends
 * with "(?:id|key)[\\\"']*\s*[:=]\s*[\\\"']*$".
 */
static int id_key_before(const unsigned char *s, Py_ssize_t p)
{
    Py_ssize_t from = p > 48 ? p - 48 : 0;
    Py_ssize_t k = p;
    while (k > from && id_glue(s[k - 1]))
        k--;
    if (k - 2 >= from && lower_is(s[k - 2], 'i') && lower_is(s[k - 1], 'd'))
        return 1;
    return k - 3 >= from && lower_is(s[k - 3], 'k') && lower_is(s[k - 2], 'e') &&
           lower_is(s[k - 1], 'y');
}

/*
 * A bare number of 7+ digits ("48213377", not "v48213377" or "48213377x"). The pattern
 * matches it only as a token, which consumes exactly the number, and classify() rejects
 * every all-digit token unless an id key precedes it ("request_id: 48213377"). A 10- or
 * 13-digit number starting with 1 is matched as an epoch instead, which classify()
 * rejects unless a time word precedes it ("created_at": ...). The rest is skipped here,
 * so digit-dense data (CSV exports, metrics, phone lists) stays at native speed. The
 * locator then yields fewer matches than the regex but the same hits (tested).
 */
static int bare_number(TimeTrail *times, const unsigned char *s, Py_ssize_t p, Py_ssize_t run,
                       Py_ssize_t limit)
{
    if (p > 0 && IS_TOKEN(s[p - 1]))
        return 0;
    if (run < 7 || (p + run < limit && IS_TOKEN(s[p + run])))
        return 0;
    if (s[p] == '1' && (run == 10 || run == 13)) /* an epoch's decimals extend its match */
        return !byte_at(s, p + run, limit, '.') && !time_word_within(times, s, p, 32);
    return !id_key_before(s, p);
}

/* Whether patterns.CANDIDATES could match at the digit-run start p, `run` digits long,
 * and what it matched could be a hit. */
static int is_candidate(TimeTrail *times, const unsigned char *s, Py_ssize_t p, Py_ssize_t run,
                        Py_ssize_t limit)
{
    if (bare_number(times, s, p, run, limit))
        return 0;
    if (p > 0 && IS_TOKEN(s[p - 1]) && token_before(s, p))
        return 1;
    if (token_after(s, p, limit))
        return 1;
    unsigned char d0 = s[p];
    if (run >= 4 && (d0 == '1' || d0 == '2')) {
        if (run == 4 && p + 4 < limit && (s[p + 4] == '-' || s[p + 4] == '/' || s[p + 4] == '.'))
            return 1; /* iso, ymd */
        if (d0 == '2' && run == 8 && byte_at(s, p + 8, limit, 'T'))
            return 1; /* isoc */
        if (d0 == '1' && run >= 10)
            return 1; /* epoch */
        return 0;
    }
    if (run > 2)
        return 0;
    Py_ssize_t q = p + run;
    if (q >= limit)
        return 0;
    unsigned char c = s[q];
    if (c == '/' || c == '.' || c == '-')
        return day_month_year(s, q, limit);
    if (c == ':') /* clock: "[d]d:dd:" */
        return q + 3 < limit && IS_DIGIT(s[q + 1]) && IS_DIGIT(s[q + 2]) && s[q + 3] == ':';
    return long_date(s, q, limit);
}

/* Whether the 8 bytes at s hold a digit ("hasbetween" from the bit-twiddling hacks). */
static int word_has_digit(const unsigned char *s)
{
    uint64_t x;
    memcpy(&x, s, sizeof x);
    const uint64_t ones = ~(uint64_t)0 / 255;
    uint64_t low = x & ones * 127;
    return (((ones * (127 + '9' + 1) - low) & ~x & (low + ones * (127 - ('0' - 1)))) & ones * 128) != 0;
}

static Py_ssize_t next_candidate(const unsigned char *s, Py_ssize_t pos, Py_ssize_t stop,
                                 Py_ssize_t limit)
{
    TimeTrail times = {0, -1};
    Py_ssize_t i = pos;
    while (i < stop) {
        if (i + 8 <= stop && !word_has_digit(s + i)) {
            i += 8;
            continue;
        }
        if (!IS_DIGIT(s[i])) {
            i++;
            continue;
        }
        /* A whole digit run at once: only its first digit can anchor the pattern. */
        Py_ssize_t run = digit_run(s, i, limit, PY_SSIZE_T_MAX);
        if (!(i > 0 && IS_DIGIT(s[i - 1])) && is_candidate(&times, s, i, run, limit))
            return i;
        i += run;
    }
    return -1;
}

PyDoc_STRVAR(next_candidate_doc,
             "next_candidate(data, pos, stop, limit) -> int\n\n"
             "The first digit-run start p, pos <= p < stop, where the candidate pattern\n"
             "could match when it may read up to `limit`; -1 when there is none.");

static PyObject *py_next_candidate(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, stop, limit;
    if (!PyArg_ParseTuple(args, "y*nnn:next_candidate", &view, &pos, &stop, &limit))
        return NULL;
    Py_ssize_t size = view.len;
    if (limit > size)
        limit = size;
    if (stop > limit)
        stop = limit;
    if (pos < 0)
        pos = 0;
    Py_ssize_t found = -1;
    const unsigned char *s = (const unsigned char *)view.buf;
    if (stop - pos > RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        found = next_candidate(s, pos, stop, limit);
        Py_END_ALLOW_THREADS
    } else if (pos < stop) {
        found = next_candidate(s, pos, stop, limit);
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(found);
}

PyDoc_STRVAR(flag_candidates_doc,
             "flag_candidates(buffers) -> list[int]\n\n"
             "The indices of the buffers in which the candidate pattern could match\n"
             "anywhere: one call for the hundreds of segments of a first-seen prompt.");

static PyObject *py_flag_candidates(PyObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "flag_candidates() takes a sequence of buffers");
    if (seq == NULL)
        return NULL;
    PyObject *flagged = PyList_New(0);
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; flagged != NULL && i < count; i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &view, PyBUF_SIMPLE) < 0) {
            Py_CLEAR(flagged);
            break;
        }
        Py_ssize_t found = next_candidate((const unsigned char *)view.buf, 0, view.len, view.len);
        PyBuffer_Release(&view);
        if (found >= 0) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyList_Append(flagged, index) < 0)
                Py_CLEAR(flagged);
            Py_XDECREF(index);
        }
    }
    Py_DECREF(seq);
    return flagged;
}

/*
 * untrack_tuples(items, shared) -> how many tuples of the list `items` were untracked.
 *
 * A request with 466,000 messages keeps one Segment (a NamedTuple) per message while it
 * is checked. CPython untracks exact tuples of atoms on its own, never a tuple subclass,
 * so every full collection walked them all: 0.1-0.8 s with the interpreter lock held, on
 * whichever thread (often the event loop's) triggered it. A tuple whose items are all
 * untracked (str, bytes, bool, int) or `shared` (the segment kind, an enum member that
 * never refers back to a segment) can be part of no reference cycle, so untracking it is
 * safe: reference counting still frees it.
 */
static const char untrack_tuples_doc[] =
    "untrack_tuples(items, shared, start=0) -> count of tuples from items[start:] taken out "
    "of cyclic GC tracking.";

static PyObject *py_untrack_tuples(PyObject *self, PyObject *args)
{
    PyObject *items, *shared;
    Py_ssize_t start = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O|n:untrack_tuples", &PyList_Type, &items, &shared, &start))
        return NULL;
    Py_ssize_t untracked = 0;
    for (Py_ssize_t i = start < 0 ? 0 : start; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyTuple_Check(item) || !PyObject_GC_IsTracked(item))
            continue;
        int atoms = 1;
        for (Py_ssize_t j = 0; atoms && j < PyTuple_GET_SIZE(item); j++) {
            PyObject *field = PyTuple_GET_ITEM(item, j);
            atoms = field == shared || !PyObject_GC_IsTracked(field);
        }
        if (atoms) {
            PyObject_GC_UnTrack(item);
            untracked++;
        }
    }
    return PyLong_FromSsize_t(untracked);
}

/*
 * untrack_flat(container) -> whether the list or tuple is now out of cyclic GC tracking.
 *
 * The prefix check of a body with 466,000 messages makes lists and tuples of 466,000
 * strings, bytes or untracked segments (names, digests, the segments themselves). While
 * young, each is walked item by item by every collection of its generation, ~10-100 ms
 * with the interpreter lock held, on whichever thread (often the event loop's) allocates
 * at that moment. A container whose items are all untracked refers to nothing that could
 * lead back to it, so it is in no reference cycle: untracking it is safe, and reference
 * counting still frees it. Only for containers their maker fills once and never changes
 * (a list untracked here is never tracked again, whatever it later holds).
 */
static const char untrack_flat_doc[] =
    "untrack_flat(container) -> True when the list or tuple, whose items are all "
    "untracked, is taken out of cyclic GC tracking.";

static PyObject *py_untrack_flat(PyObject *self, PyObject *container)
{
    (void)self;
    if (!PyList_CheckExact(container) && !PyTuple_CheckExact(container)) {
        PyErr_SetString(PyExc_TypeError, "untrack_flat expects a list or a tuple");
        return NULL;
    }
    if (!PyObject_GC_IsTracked(container))
        Py_RETURN_TRUE;
    Py_ssize_t size = Py_SIZE(container);
    PyObject **items = PyList_CheckExact(container) ? ((PyListObject *)container)->ob_item
                                                    : ((PyTupleObject *)container)->ob_item;
    for (Py_ssize_t i = 0; i < size; i++)
        if (PyObject_IS_GC(items[i]) && PyObject_GC_IsTracked(items[i]))
            Py_RETURN_FALSE;
    PyObject_GC_UnTrack(container);
    Py_RETURN_TRUE;
}

/* Items handled between two offers of the interpreter lock: ~1 ms of cache misses. */
#define YIELD_ITEMS 32768

/* Let a thread waiting for the interpreter lock (the event loop's) have it, then go on. */
static void yield_lock(void)
{
    Py_BEGIN_ALLOW_THREADS
    Py_END_ALLOW_THREADS
}

/* The items of `items` again after the lock was let go, or NULL (an error set) when the
 * list no longer holds `stop` of them. */
static PyObject **refreshed(PyObject *items, Py_ssize_t stop)
{
    if (Py_SIZE(items) < stop) {
        PyErr_SetString(PyExc_RuntimeError, "untracked_tuple: the list shrank while copied");
        return NULL;
    }
    return PyList_CheckExact(items) ? ((PyListObject *)items)->ob_item
                                    : ((PyTupleObject *)items)->ob_item;
}

/* untracked_tuple(items, start=0, stop=len) -> tuple(items[start:stop]), out of cyclic GC
 * when all those items are. One pass over the items, where tuple() or a slice and then
 * untrack_flat() would make two (each ~10-20 ms for 466,000 items on the dev box, lock
 * held), and the lock offered to other threads every `YIELD_ITEMS` items. `items` is a
 * list or a tuple. */
static const char untracked_tuple_doc[] =
    "untracked_tuple(items, start=0, stop=len(items)) -> tuple(items[start:stop]), out of "
    "cyclic GC tracking when all its items are.";

static PyObject *py_untracked_tuple(PyObject *self, PyObject *args)
{
    PyObject *items;
    Py_ssize_t start = 0, stop = PY_SSIZE_T_MAX;
    (void)self;
    if (!PyArg_ParseTuple(args, "O|nn:untracked_tuple", &items, &start, &stop))
        return NULL;
    if (!PyList_CheckExact(items) && !PyTuple_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "untracked_tuple expects a list or a tuple");
        return NULL;
    }
    PyObject **source = PyList_CheckExact(items) ? ((PyListObject *)items)->ob_item
                                                 : ((PyTupleObject *)items)->ob_item;
    Py_ssize_t size = Py_SIZE(items);
    start = start < 0 ? 0 : start > size ? size : start;
    stop = stop > size ? size : stop < start ? start : stop;
    PyObject *tuple = PyTuple_New(stop - start);
    if (tuple == NULL)
        return NULL;
    /* Untracked while it is filled: a collection in the thread that takes the lock while
     * this one lets go of it must not walk a tuple half made. */
    PyObject_GC_UnTrack(tuple);
    int atoms = 1;
    for (Py_ssize_t i = start; i < stop; i++) {
        if ((i - start) % YIELD_ITEMS == YIELD_ITEMS - 1) {
            yield_lock();
            source = refreshed(items, stop);
            if (source == NULL) {
                Py_DECREF(tuple);
                return NULL;
            }
        }
        PyObject *item = source[i];
        Py_INCREF(item);
        PyTuple_SET_ITEM(tuple, i - start, item);
        if (atoms && PyObject_GC_IsTracked(item))
            atoms = 0;
    }
    if (!atoms)
        PyObject_GC_Track(tuple);
    return tuple;
}

/* moved_tuple(items, acyclic=False) -> a tuple of the list's items, the list left empty.
 *
 * The references move from the list to the tuple: no item is touched, where a copy
 * increments every item's count and freeing the list decrements them again (for 466,000
 * strings, two passes of 10-20 ms each with the lock held, a cache miss per item). The
 * tuple is out of cyclic GC when `acyclic` says nothing in it leads back to it (the
 * columns of the prefix check: strings, bytes, ints, untracked segments), else when all
 * its items are untracked. For a list only its maker holds. */
static const char moved_tuple_doc[] =
    "moved_tuple(items, acyclic=False) -> tuple of the list's items, moved, not copied; "
    "the list is left empty.";

static PyObject *py_moved_tuple(PyObject *self, PyObject *args)
{
    PyObject *items;
    int acyclic = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!|p:moved_tuple", &PyList_Type, &items, &acyclic))
        return NULL;
    PyListObject *list = (PyListObject *)items;
    Py_ssize_t size = Py_SIZE(list);
    PyObject *tuple = PyTuple_New(size);
    if (tuple == NULL)
        return NULL;
    if (size == 0)
        return tuple;
    memcpy(((PyTupleObject *)tuple)->ob_item, list->ob_item, size * sizeof(PyObject *));
    PyMem_Free(list->ob_item);
    list->ob_item = NULL;
    list->allocated = 0;
    Py_SET_SIZE(list, 0);
    int untrack = 1;
    for (Py_ssize_t i = 0; !acyclic && i < size; i++) {
        if (PyObject_GC_IsTracked(PyTuple_GET_ITEM(tuple, i))) {
            untrack = 0;
            break;
        }
    }
    if (untrack)
        PyObject_GC_UnTrack(tuple);
    return tuple;
}

/* take_items(owner, key) -> a list of the items of `owner.key` (or `owner[key]` for a
 * list owner), moved out of it, or None.
 *
 * Freeing a tuple of 466,000 items is one C call that decrements all of them (10-20 ms
 * with the lock held), and more when they die with it. The sequence is detached from
 * its owner (the attribute set to (), the list slot to None); when that left this
 * function the only holder, its references move to a new list, untouched, and the
 * emptied sequence is freed at once; the caller frees the list a slice at a time. A
 * sequence someone else still holds is left alone (None). */
static const char take_items_doc[] =
    "take_items(owner, key) -> list of the items moved out of owner.key (or owner[key]), "
    "detached from owner; None when someone else holds the sequence too.";

static PyObject *py_take_items(PyObject *self, PyObject *args)
{
    PyObject *owner, *key, *value;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO:take_items", &owner, &key))
        return NULL;
    if (PyList_CheckExact(owner)) {
        Py_ssize_t index = PyLong_AsSsize_t(key);
        if (index == -1 && PyErr_Occurred())
            return NULL;
        if (index < 0 || index >= PyList_GET_SIZE(owner)) {
            PyErr_SetString(PyExc_IndexError, "take_items: index out of range");
            return NULL;
        }
        value = PyList_GET_ITEM(owner, index); /* the list's reference becomes ours */
        Py_INCREF(Py_None);
        PyList_SET_ITEM(owner, index, Py_None);
    } else {
        value = PyObject_GetAttr(owner, key);
        if (value == NULL)
            return NULL;
        PyObject *empty = PyTuple_New(0);
        int failed = empty == NULL || PyObject_GenericSetAttr(owner, key, empty) < 0;
        Py_XDECREF(empty);
        if (failed) {
            Py_DECREF(value);
            return NULL;
        }
    }
    int is_tuple = PyTuple_CheckExact(value);
    if (Py_REFCNT(value) != 1 || !(is_tuple || PyList_CheckExact(value))) {
        Py_DECREF(value);
        Py_RETURN_NONE;
    }
    Py_ssize_t size = Py_SIZE(value);
    PyObject *moved = PyList_New(size);
    if (moved == NULL) {
        Py_DECREF(value);
        return NULL;
    }
    PyObject_GC_UnTrack(moved); /* scratch, seen by nobody but the caller: see untrack_flat */
    PyObject **from = is_tuple ? ((PyTupleObject *)value)->ob_item
                               : ((PyListObject *)value)->ob_item;
    if (size > 0)
        memcpy(((PyListObject *)moved)->ob_item, from, size * sizeof(PyObject *));
    if (is_tuple) {
        memset(from, 0, size * sizeof(PyObject *)); /* a tuple frees NULL items as nothing */
    } else {
        PyMem_Free(from);
        ((PyListObject *)value)->ob_item = NULL;
        ((PyListObject *)value)->allocated = 0;
        Py_SET_SIZE(value, 0);
    }
    Py_DECREF(value);
    return moved;
}

/* ---- The segment cut and the fingerprint chain (gateway/prefix/segments.py, record.py) ---- */

#define CHAIN_YIELD 8192

static int hex_value(Py_UCS4 c)
{
    if (c >= '0' && c <= '9')
        return (int)(c - '0');
    if (c >= 'a' && c <= 'f')
        return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F')
        return (int)(c - 'A' + 10);
    return -1;
}

/* hex_value of every byte, 0x10 where it is not a hex digit: a lookup, where the digit or
 * letter branches of random hex mispredicted about one digit in three (~80 of chain_hex's
 * ~130 ns a link). */
static unsigned char HEX_VALUE[256];

static void init_hex_values(void)
{
    for (int c = 0; c < 256; c++) {
        int v = hex_value((Py_UCS4)c);
        HEX_VALUE[c] = (unsigned char)(v < 0 ? 0x10 : v);
    }
}

/* 16 bytes from a str of exactly 32 hex digits; 0 when it is anything else. */
static int hex16(PyObject *text, unsigned char *out)
{
    if (!PyUnicode_CheckExact(text) || PyUnicode_READY(text) < 0 ||
        PyUnicode_GET_LENGTH(text) != 32 || PyUnicode_KIND(text) != PyUnicode_1BYTE_KIND)
        return 0;
    const Py_UCS1 *s = PyUnicode_1BYTE_DATA(text);
    unsigned bad = 0;
    for (int i = 0; i < 16; i++) {
        unsigned hi = HEX_VALUE[s[2 * i]], lo = HEX_VALUE[s[2 * i + 1]];
        bad |= hi | lo;
        out[i] = (unsigned char)(hi << 4 | (lo & 15));
    }
    return (bad & 0x10) == 0;
}

static PyObject *hex_of(const unsigned char *data, Py_ssize_t size)
{
    static const char digits[] = "0123456789abcdef";
    PyObject *text = PyUnicode_New(2 * size, 127);
    if (text == NULL)
        return NULL;
    Py_UCS1 *out = PyUnicode_1BYTE_DATA(text);
    for (Py_ssize_t i = 0; i < size; i++) {
        out[2 * i] = (Py_UCS1)digits[data[i] >> 4];
        out[2 * i + 1] = (Py_UCS1)digits[data[i] & 15];
    }
    return text;
}

/* ---- xxh3 called directly (bind_xxh3) ----
 *
 * xxhash's extension exports the C library's own symbols (XXH3_128bits among them). No
 * header is needed: the function's ABI is one pointer and one size in, a struct of two
 * uint64 (low64, high64) out, the same in every xxHash release since 0.8. bind_xxh3 looks
 * the symbol up in the already loaded module and keeps it only when its canonical digests
 * (high64 then low64, big-endian: XXH128_canonicalFromHash) equal the Python function's
 * on a set of lengths; then chain_hex and plain_segments hash with it when given that
 * same function object, and call the object otherwise. */
typedef struct {
    uint64_t low64, high64;
} Xxh128;
typedef Xxh128 (*Xxh3Fn)(const void *, size_t);

static Xxh3Fn xxh3_fn = NULL;
static PyObject *xxh3_bound = NULL; /* the Python function xxh3_fn stands for */

static void xxh3_canonical(const void *data, size_t size, unsigned char out[16])
{
    Xxh128 h = xxh3_fn(data, size);
    for (int i = 0; i < 8; i++) {
        out[i] = (unsigned char)(h.high64 >> (56 - 8 * i));
        out[8 + i] = (unsigned char)(h.low64 >> (56 - 8 * i));
    }
}

static int xxh3_agrees(PyObject *hasher)
{
    static const Py_ssize_t sizes[] = {0, 1, 3, 4, 8, 9, 16, 17, 32, 128, 129, 240, 241, 1000, 5000};
    unsigned char buffer[5000], mine[16];
    for (int i = 0; i < 5000; i++)
        buffer[i] = (unsigned char)(i * 131 + 7);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        PyObject *data = PyBytes_FromStringAndSize((const char *)buffer, sizes[k]);
        if (data == NULL)
            return -1;
        PyObject *theirs = PyObject_CallOneArg(hasher, data);
        Py_DECREF(data);
        if (theirs == NULL)
            return -1;
        xxh3_canonical(buffer, (size_t)sizes[k], mine);
        int same = PyBytes_CheckExact(theirs) && PyBytes_GET_SIZE(theirs) == 16 &&
                   memcmp(PyBytes_AS_STRING(theirs), mine, 16) == 0;
        Py_DECREF(theirs);
        if (!same)
            return 0;
    }
    return 1;
}

static const char bind_xxh3_doc[] =
    "bind_xxh3(hasher, path) -> bool: hash with XXH3_128bits from the loaded library at path "
    "where hasher is passed, when its digests are hasher's.";

static PyObject *py_bind_xxh3(PyObject *self, PyObject *args)
{
    PyObject *hasher;
    const char *path;
    (void)self;
    if (!PyArg_ParseTuple(args, "Os:bind_xxh3", &hasher, &path))
        return NULL;
#ifdef _WIN32
    (void)path;
    Py_RETURN_FALSE;
#else
    void *library = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (library == NULL)
        Py_RETURN_FALSE;
    Xxh3Fn found = (Xxh3Fn)dlsym(library, "XXH3_128bits");
    dlclose(library); /* NOLOAD: only drops the count this call added */
    if (found == NULL)
        Py_RETURN_FALSE;
    Xxh3Fn kept = xxh3_fn;
    xxh3_fn = found;
    int agrees = xxh3_agrees(hasher);
    if (agrees != 1) {
        xxh3_fn = kept;
        if (agrees < 0)
            return NULL;
        Py_RETURN_FALSE;
    }
    Py_INCREF(hasher);
    Py_XSETREF(xxh3_bound, hasher);
    Py_RETURN_TRUE;
#endif
}

static int native_xxh3(PyObject *hasher)
{
    return xxh3_fn != NULL && hasher == xxh3_bound;
}

/* ---- A parsed body's messages out of cyclic GC (untrack_items) ---- */

#define UNTRACK_DEPTH 256

/* Untrack `value`'s dicts and lists bottom-up, each one only when all it holds is out of
 * cyclic GC (atoms, or containers so untracked): CPython's own rule for dicts and tuples,
 * applied to lists too. 1 when `value` ends up out of cyclic GC. Other types, and what
 * lies deeper than UNTRACK_DEPTH, are left as they are. */
static int untrack_json(PyObject *value, int depth)
{
    if (!PyObject_IS_GC(value))
        return 1;
    int all = 1;
    if (PyDict_CheckExact(value)) {
        if (depth >= UNTRACK_DEPTH)
            return !PyObject_GC_IsTracked(value);
        Py_ssize_t pos = 0;
        PyObject *key, *item;
        while (PyDict_Next(value, &pos, &key, &item))
            all &= untrack_json(key, depth + 1) & untrack_json(item, depth + 1);
    } else if (PyList_CheckExact(value)) {
        if (depth >= UNTRACK_DEPTH)
            return !PyObject_GC_IsTracked(value);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(value); i++)
            all &= untrack_json(PyList_GET_ITEM(value, i), depth + 1);
    } else {
        return !PyObject_GC_IsTracked(value);
    }
    if (all && PyObject_GC_IsTracked(value))
        PyObject_GC_UnTrack(value);
    return all;
}

static const char untrack_items_doc[] =
    "untrack_items(values) -> int: take each item of the list (parsed JSON) out of cyclic GC "
    "bottom-up, the list itself left tracked; the count of items now out of it.";

static PyObject *py_untrack_items(PyObject *self, PyObject *values)
{
    (void)self;
    if (!PyList_CheckExact(values)) {
        PyErr_SetString(PyExc_TypeError, "untrack_items expects a list");
        return NULL;
    }
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++)
        count += untrack_json(PyList_GET_ITEM(values, i), 1);
    return PyLong_FromSsize_t(count);
}

/* chain_hex(hasher, previous, digests) -> tuple of hex str, or None.
 *
 * fingerprint i = hasher(fingerprint i-1 + bytes.fromhex(digests[i]))[:16], as hex, from
 * `previous` (16 bytes): `record.chain_fingerprints`' loop, ~0.15 us a link where the
 * Python loop took ~0.6. The hasher is called (xxhash's own function), so the links are
 * its. None, to take the Python loop, when a digest is not 32 hex digits or a hash is not
 * 16 bytes or more. The lock is offered every CHAIN_YIELD links. */
static const char chain_hex_doc[] =
    "chain_hex(hasher, previous, digests) -> tuple of hex fingerprints, or None where the "
    "Python loop must decide.";

static PyObject *py_chain_hex(PyObject *self, PyObject *args)
{
    PyObject *hasher, *digests;
    const char *start;
    Py_ssize_t start_size;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy#O:chain_hex", &hasher, &start, &start_size, &digests))
        return NULL;
    if (start_size != 16) {
        PyErr_SetString(PyExc_ValueError, "chain_hex: previous must be 16 bytes");
        return NULL;
    }
    if (!PyList_CheckExact(digests) && !PyTuple_CheckExact(digests)) {
        PyErr_SetString(PyExc_TypeError, "chain_hex expects a list or a tuple");
        return NULL;
    }
    Py_ssize_t size = Py_SIZE(digests);
    PyObject *result = PyTuple_New(size);
    if (result == NULL)
        return NULL;
    PyObject_GC_UnTrack(result); /* strings only, filled while the lock may change hands */
    unsigned char link[32];
    memcpy(link, start, 16);
    int native = native_xxh3(hasher);
    for (Py_ssize_t i = 0; i < size; i++) {
        if (i % CHAIN_YIELD == CHAIN_YIELD - 1) {
            yield_lock();
            if (Py_SIZE(digests) != size) {
                Py_DECREF(result);
                PyErr_SetString(PyExc_RuntimeError, "chain_hex: the digests changed size");
                return NULL;
            }
        }
        PyObject *item = PyList_CheckExact(digests) ? PyList_GET_ITEM(digests, i)
                                                    : PyTuple_GET_ITEM(digests, i);
        if (!hex16(item, link + 16)) {
            Py_DECREF(result);
            Py_RETURN_NONE;
        }
        if (native) {
            xxh3_canonical(link, 32, link);
            PyObject *text = hex_of(link, 16);
            if (text == NULL) {
                Py_DECREF(result);
                return NULL;
            }
            PyTuple_SET_ITEM(result, i, text);
            continue;
        }
        PyObject *data = PyBytes_FromStringAndSize((const char *)link, 32);
        if (data == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyObject *hashed = PyObject_CallOneArg(hasher, data);
        Py_DECREF(data);
        if (hashed == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        if (!PyBytes_CheckExact(hashed) || PyBytes_GET_SIZE(hashed) < 16) {
            Py_DECREF(hashed);
            Py_DECREF(result);
            Py_RETURN_NONE;
        }
        memcpy(link, PyBytes_AS_STRING(hashed), 16);
        Py_DECREF(hashed);
        PyObject *text = hex_of(link, 16);
        if (text == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, text);
    }
    return result;
}

/* array_items(batch) -> list of bytes: the items of a compact JSON array, each cut out.
 *
 * For orjson's own output (no whitespace, valid): `_dump_chunk`'s walk and slices in one
 * call. Items are what lies between the commas at depth one, strings skipped by their
 * escapes; the walk runs without the lock for a large array. ValueError when the array is
 * not so shaped (the caller falls back). */
static const char array_items_doc[] =
    "array_items(batch) -> list of the items of a compact JSON array, as bytes.";

typedef struct {
    Py_ssize_t *ends;
    Py_ssize_t count, allocated;
} Ends;

/* Appends an offset; 0 when out of memory (no exception set: the lock may be released). */
static int add_end(Ends *e, Py_ssize_t at)
{
    if (e->count == e->allocated) {
        Py_ssize_t grown = e->allocated * 2;
        Py_ssize_t *more = realloc(e->ends, sizeof(Py_ssize_t) * (size_t)grown);
        if (more == NULL)
            return 0;
        e->ends = more;
        e->allocated = grown;
    }
    e->ends[e->count++] = at;
    return 1;
}

/* Fills `e` with the offset past each item; 1, or 0 when not so shaped, -1 out of memory. */
static int walk_items(const unsigned char *s, Py_ssize_t n, Ends *e)
{
    Py_ssize_t depth = 0;
    if (n < 2 || s[0] != '[' || s[n - 1] != ']')
        return 0;
    if (n == 2)
        return 1;
    const unsigned char *end = s + n - 1;
    for (const unsigned char *p = s + 1; p < end; p++) {
        unsigned char c = *p;
        if (c == '"') {
            for (;;) {
                const unsigned char *q = memchr(p + 1, '"', (size_t)(end - p - 1));
                if (q == NULL)
                    return 0;
                /* escaped when an odd run of backslashes precedes it */
                const unsigned char *b = q;
                while (b > p + 1 && b[-1] == '\\')
                    b--;
                p = q;
                if (((q - b) & 1) == 0)
                    break;
            }
        } else if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (--depth < 0)
                return 0;
        } else if (c == ',' && depth == 0) {
            if (!add_end(e, p - s))
                return -1;
        } else if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
            return 0; /* not compact: not orjson's */
        }
    }
    if (depth != 0)
        return 0;
    return add_end(e, n - 1) ? 1 : -1;
}

static PyObject *py_array_items(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "array_items expects bytes");
        return NULL;
    }
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg);
    Ends e = {malloc(sizeof(Py_ssize_t) * 1024), 0, 1024};
    if (e.ends == NULL)
        return PyErr_NoMemory();
    int shaped;
    if (n >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS /* `arg` is bytes, held by the caller: it cannot change */
        shaped = walk_items(s, n, &e);
        Py_END_ALLOW_THREADS
    } else {
        shaped = walk_items(s, n, &e);
    }
    if (shaped <= 0) {
        free(e.ends);
        if (shaped < 0)
            return PyErr_NoMemory();
        PyErr_SetString(PyExc_ValueError, "array_items: not a compact JSON array");
        return NULL;
    }
    PyObject *items = PyList_New(e.count);
    if (items == NULL) {
        free(e.ends);
        return NULL;
    }
    PyObject_GC_UnTrack(items); /* bytes only: never in a cycle */
    Py_ssize_t from = 1;
    for (Py_ssize_t k = 0; k < e.count; k++) {
        PyObject *piece = PyBytes_FromStringAndSize((const char *)s + from, e.ends[k] - from);
        if (piece == NULL) {
            free(e.ends);
            Py_DECREF(items);
            return NULL;
        }
        PyList_SET_ITEM(items, k, piece);
        from = e.ends[k] + 1;
    }
    free(e.ends);
    return items;
}

static PyObject *content_key, *role_key, *empty_str, *empty_bytes;

/* canonical_items(raw, start) -> (items, flags), or None.
 *
 * The items of the JSON array that opens at raw[start], each cut out of `raw` where it is
 * already byte for byte what `orjson.dumps` writes of its parsed value (its canonical
 * bytes, `segments.canonical_bytes`), else None in its place: the cut need not dump those
 * messages again. `raw` must have been parsed by orjson already (valid JSON and UTF-8, no
 * raw control character in a string): what is checked here is the form, conservatively.
 * Canonical means: no whitespace outside strings; in strings only orjson's escapes (\"
 * \\ \b \t \n \f \r, and \u00xx in lower-case hex for the other control characters);
 * integers of at most 18 digits, not -0 (orjson reads larger ones as floats; no fraction
 * or exponent is taken); true, false, null; objects without a repeated key (orjson keeps
 * the last value, so the dump differs), of at most CANON_KEYS keys; nesting up to
 * CANON_DEPTH. Whitespace between the items is allowed (it is not theirs). `flags` holds
 * a byte per item: 1 where a canonical item has, at any depth, a `cache_control` or
 * `prompt_cache_breakpoint` key or a `content` key whose value is an array (what
 * `rawjson.list_or_marker` tells of its bytes); 0 for a None. None when raw[start] opens
 * no array, or more than `limit` items are not canonical. The walk runs without the lock for a large array (`raw` is bytes: it cannot
 * change). */
static const char canonical_items_doc[] =
    "canonical_items(raw, start, limit=max) -> (list of the array's items as bytes where "
    "canonical, else None; flags), or None.";

#define CANON_DEPTH 128
#define CANON_KEYS 64

typedef struct {
    const unsigned char *s;
    Py_ssize_t n;
    int flagged; /* the current item has a marker key or an array-valued content */
} Canon;

/* The length of the canonical escape at s[at] == '\\', or 0 when it is not orjson's. */
static Py_ssize_t canon_escape(const unsigned char *s, Py_ssize_t n, Py_ssize_t at)
{
    if (at + 1 >= n)
        return 0;
    switch (s[at + 1]) {
    case '"': case '\\': case 'b': case 't': case 'n': case 'f': case 'r':
        return 2;
    case 'u':
        break;
    default:
        return 0;
    }
    if (at + 5 >= n || s[at + 2] != '0' || s[at + 3] != '0')
        return 0;
    int high = s[at + 4], low = s[at + 5], value;
    if (high != '0' && high != '1')
        return 0;
    if (low >= '0' && low <= '9')
        value = low - '0';
    else if (low >= 'a' && low <= 'f')
        value = low - 'a' + 10;
    else
        return 0;
    value += (high - '0') * 16;
    /* these five orjson writes short (\b \t \n \f \r) */
    if (value == 8 || value == 9 || value == 10 || value == 12 || value == 13)
        return 0;
    return 6;
}

/* Past the canonical string that opens at s[p] == '"', or -1.
 *
 * Sixteen bytes a step where SSE2 is there: code is dense in escapes (one each ~25
 * bytes), so a block's are checked from bit masks, not one by one. A block whose
 * backslashes are each an escape's first byte (no escaped backslash) and whose escaped
 * bytes are each one of " b t n f r is taken whole (its string end, if any, is the first
 * unescaped quote); any other block (\\, \u00xx, an escape orjson does not write) is
 * walked byte by byte. */
static Py_ssize_t canon_string(const unsigned char *s, Py_ssize_t n, Py_ssize_t p)
{
    p++;
#ifdef __SSE2__
    unsigned carry = 0; /* s[p] is escaped by the backslash that ended the last block */
    while (n - p >= 16) {
        __m128i block = _mm_loadu_si128((const __m128i *)(s + p));
        __m128i quote = _mm_cmpeq_epi8(block, _mm_set1_epi8('"'));
        unsigned quotes = (unsigned)_mm_movemask_epi8(quote);
        unsigned slashes = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(block, _mm_set1_epi8('\\')));
        if ((slashes | carry) == 0) {
            /* No escape in the block (most of them): the first quote ends the string. */
            if (quotes != 0)
                return p + __builtin_ctz(quotes) + 1;
            p += 16;
            continue;
        }
        __m128i short_escape = _mm_or_si128(
            _mm_or_si128(_mm_or_si128(quote, _mm_cmpeq_epi8(block, _mm_set1_epi8('b'))),
                         _mm_or_si128(_mm_cmpeq_epi8(block, _mm_set1_epi8('t')),
                                      _mm_cmpeq_epi8(block, _mm_set1_epi8('n')))),
            _mm_or_si128(_mm_cmpeq_epi8(block, _mm_set1_epi8('f')),
                         _mm_cmpeq_epi8(block, _mm_set1_epi8('r'))));
        unsigned shorts = (unsigned)_mm_movemask_epi8(short_escape);
        unsigned escaped = ((slashes << 1) | carry) & 0xFFFFu;
        if ((slashes & escaped) == 0 && (escaped & ~shorts) == 0) {
            unsigned ends = quotes & ~escaped;
            if (ends != 0)
                return p + __builtin_ctz(ends) + 1;
            carry = slashes >> 15;
            p += 16;
            continue;
        }
        Py_ssize_t stop = p + 16;
        p -= carry; /* the escape began in the last block */
        while (p < stop) {
            if (s[p] == '"')
                return p + 1;
            if (s[p] == '\\') {
                Py_ssize_t length = canon_escape(s, n, p);
                if (length == 0)
                    return -1;
                p += length;
            } else
                p++;
        }
        carry = 0;
    }
    p -= carry;
#endif
    for (;;) {
        while (p < n && s[p] != '"' && s[p] != '\\')
            p++;
        if (p >= n)
            return -1;
        if (s[p] == '"')
            return p + 1;
        Py_ssize_t length = canon_escape(s, n, p);
        if (length == 0)
            return -1;
        p += length;
    }
}

/* Past the canonical integer at s[p], or -1. */
static Py_ssize_t canon_integer(const unsigned char *s, Py_ssize_t n, Py_ssize_t p)
{
    int negative = s[p] == '-';
    Py_ssize_t first = p + negative;
    p = first;
    while (p < n && s[p] >= '0' && s[p] <= '9')
        p++;
    Py_ssize_t digits = p - first;
    /* no leading zero, no -0 (orjson writes 0) */
    if (digits == 0 || digits > 18 || (s[first] == '0' && (digits > 1 || negative)))
        return -1;
    if (p < n && (s[p] == '.' || s[p] == 'e' || s[p] == 'E'))
        return -1;
    return p;
}

static int key_named(const unsigned char *s, Py_ssize_t at, Py_ssize_t end, const char *name)
{
    size_t length = strlen(name);
    return (size_t)(end - at - 2) == length && memcmp(s + at + 1, name, length) == 0;
}

static Py_ssize_t canon_value(Canon *c, Py_ssize_t p, int depth);

static Py_ssize_t canon_object(Canon *c, Py_ssize_t p, int depth)
{
    const unsigned char *s = c->s;
    Py_ssize_t n = c->n, keys[CANON_KEYS][2];
    int count = 0;
    p++;
    if (p < n && s[p] == '}')
        return p + 1;
    for (;;) {
        if (p >= n || s[p] != '"' || count == CANON_KEYS)
            return -1;
        Py_ssize_t end = canon_string(s, n, p);
        if (end < 0 || end >= n || s[end] != ':')
            return -1;
        /* a canonical string is its value's only spelling: equal bytes, equal keys */
        for (int k = 0; k < count; k++)
            if (keys[k][1] - keys[k][0] == end - p && memcmp(s + keys[k][0], s + p, (size_t)(end - p)) == 0)
                return -1;
        keys[count][0] = p;
        keys[count][1] = end;
        count++;
        if (key_named(s, p, end, "cache_control") || key_named(s, p, end, "prompt_cache_breakpoint"))
            c->flagged = 1;
        else if (key_named(s, p, end, "content") && end + 1 < n && s[end + 1] == '[')
            c->flagged = 1;
        p = canon_value(c, end + 1, depth);
        if (p < 0 || p >= n)
            return -1;
        if (s[p] == '}')
            return p + 1;
        if (s[p] != ',')
            return -1;
        p++;
    }
}

static Py_ssize_t canon_array(Canon *c, Py_ssize_t p, int depth)
{
    const unsigned char *s = c->s;
    Py_ssize_t n = c->n;
    p++;
    if (p < n && s[p] == ']')
        return p + 1;
    for (;;) {
        p = canon_value(c, p, depth);
        if (p < 0 || p >= n)
            return -1;
        if (s[p] == ']')
            return p + 1;
        if (s[p] != ',')
            return -1;
        p++;
    }
}

static Py_ssize_t canon_value(Canon *c, Py_ssize_t p, int depth)
{
    const unsigned char *s = c->s;
    Py_ssize_t n = c->n;
    if (p >= n || depth >= CANON_DEPTH)
        return -1;
    switch (s[p]) {
    case '"':
        return canon_string(s, n, p);
    case '{':
        return canon_object(c, p, depth + 1);
    case '[':
        return canon_array(c, p, depth + 1);
    case 't':
        return p + 4 <= n && memcmp(s + p, "true", 4) == 0 ? p + 4 : -1;
    case 'f':
        return p + 5 <= n && memcmp(s + p, "false", 5) == 0 ? p + 5 : -1;
    case 'n':
        return p + 4 <= n && memcmp(s + p, "null", 4) == 0 ? p + 4 : -1;
    default:
        if (s[p] == '-' || (s[p] >= '0' && s[p] <= '9'))
            return canon_integer(s, n, p);
        return -1;
    }
}

/* Past the string that opens at s[p] == '"' (escapes not checked: `raw` was parsed), or -1. */
static Py_ssize_t skip_any_string(const unsigned char *s, Py_ssize_t n, Py_ssize_t p)
{
    for (;;) {
        const unsigned char *q = memchr(s + p + 1, '"', (size_t)(n - p - 1));
        if (q == NULL)
            return -1;
        const unsigned char *b = q; /* escaped when an odd run of backslashes precedes it */
        while (b > s + p + 1 && b[-1] == '\\')
            b--;
        p = q - s;
        if (((q - b) & 1) == 0)
            return p + 1;
    }
}

/* Past the value at s[p] in any JSON form (trusted: `raw` was parsed), or -1. */
static Py_ssize_t skip_any_value(const unsigned char *s, Py_ssize_t n, Py_ssize_t p)
{
    Py_ssize_t depth = 0;
    while (p < n) {
        unsigned char c = s[p];
        if (c == '"') {
            p = skip_any_string(s, n, p);
            if (p < 0)
                return -1;
            if (depth == 0)
                return p;
            continue;
        }
        if (c == '[' || c == '{')
            depth++;
        else if (c == ']' || c == '}') {
            if (depth == 0)
                return p; /* a number or literal ended where its array does */
            if (--depth == 0)
                return p + 1;
        } else if (depth == 0 && (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t'))
            return p;
        p++;
    }
    return -1;
}

static Py_ssize_t skip_blank(const unsigned char *s, Py_ssize_t n, Py_ssize_t p)
{
    while (p < n && (s[p] == ' ' || s[p] == '\n' || s[p] == '\r' || s[p] == '\t'))
        p++;
    return p;
}

/* Fills `e` with two entries per item: its first offset * 2 + whether it is canonical,
 * and the offset past it * 2 + its flag. 1, or 0 when the array is not shaped as JSON,
 * -1 out of memory (no exception set: the lock may be released). */
static int canon_items(const unsigned char *s, Py_ssize_t n, Py_ssize_t p, Ends *e, Py_ssize_t limit)
{
    Canon c = {s, n, 0};
    Py_ssize_t others = 0;
    if (p < 0 || p >= n || s[p] != '[')
        return 0;
    p = skip_blank(s, n, p + 1);
    if (p < n && s[p] == ']')
        return 1;
    for (;;) {
        c.flagged = 0;
        Py_ssize_t end = canon_value(&c, p, 1);
        int canonical = end >= 0;
        if (!canonical && (++others > limit || (end = skip_any_value(s, n, p)) < 0))
            return 0;
        if (!add_end(e, p * 2 + canonical) || !add_end(e, end * 2 + (canonical && c.flagged)))
            return -1;
        p = skip_blank(s, n, end);
        if (p >= n)
            return 0;
        if (s[p] == ']')
            return 1;
        if (s[p] != ',')
            return 0;
        p = skip_blank(s, n, p + 1);
    }
}

static PyObject *py_canonical_items(PyObject *self, PyObject *args)
{
    PyObject *raw;
    Py_ssize_t start, limit = PY_SSIZE_T_MAX;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!n|n:canonical_items", &PyBytes_Type, &raw, &start, &limit))
        return NULL;
    if (!PyBytes_CheckExact(raw)) {
        PyErr_SetString(PyExc_TypeError, "canonical_items expects bytes");
        return NULL;
    }
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(raw);
    Py_ssize_t n = PyBytes_GET_SIZE(raw);
    Ends e = {malloc(sizeof(Py_ssize_t) * 1024), 0, 1024};
    if (e.ends == NULL)
        return PyErr_NoMemory();
    int shaped;
    if (n - start >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS /* `raw` is bytes, held by the caller: it cannot change */
        shaped = canon_items(s, n, start, &e, limit);
        Py_END_ALLOW_THREADS
    } else {
        shaped = canon_items(s, n, start, &e, limit);
    }
    if (shaped <= 0) {
        free(e.ends);
        if (shaped < 0)
            return PyErr_NoMemory();
        Py_RETURN_NONE;
    }
    Py_ssize_t count = e.count / 2;
    PyObject *items = PyList_New(count);
    PyObject *flags = PyBytes_FromStringAndSize(NULL, count);
    if (items == NULL || flags == NULL) {
        free(e.ends);
        Py_XDECREF(items);
        Py_XDECREF(flags);
        return NULL;
    }
    PyObject_GC_UnTrack(items); /* bytes and None only: never in a cycle */
    char *flag = PyBytes_AS_STRING(flags);
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t from = e.ends[2 * k] >> 1, end = e.ends[2 * k + 1] >> 1;
        PyObject *piece = Py_None;
        if (e.ends[2 * k] & 1)
            piece = PyBytes_FromStringAndSize((const char *)s + from, end - from);
        else
            Py_INCREF(piece);
        if (piece == NULL) {
            free(e.ends);
            Py_DECREF(items);
            Py_DECREF(flags);
            return NULL;
        }
        PyList_SET_ITEM(items, k, piece);
        flag[k] = (char)(e.ends[2 * k + 1] & 1);
    }
    free(e.ends);
    PyObject *result = PyTuple_Pack(2, items, flags);
    Py_DECREF(items);
    Py_DECREF(flags);
    return result;
}

/* plain_segments(segments, cls, names, kind, pieces, hasher, roles) -> None.
 *
 * Appends to the list `segments` one `cls` (a tuple subclass: `segments.Segment`) per
 * piece: (names[i], kind, pieces[i], hasher(pieces[i]), False, b"", roles[i]), out of
 * cyclic GC (its fields are atoms and `kind`, as `untrack_tuples` takes them).
 * `segments._plain_segments`' zip and `tuple.__new__` map (two tuples a segment) in one
 * allocation a segment. */
static const char plain_segments_doc[] =
    "plain_segments(segments, cls, names, kind, pieces, hasher, roles) -> None: append a "
    "cls tuple per piece.";

static PyObject *py_plain_segments(PyObject *self, PyObject *args)
{
    PyObject *segments, *names, *kind, *pieces, *hasher, *roles;
    PyTypeObject *cls;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!OO!:plain_segments", &PyList_Type, &segments,
                          &PyType_Type, &cls, &PyList_Type, &names, &kind, &PyList_Type,
                          &pieces, &hasher, &PyList_Type, &roles))
        return NULL;
    Py_ssize_t size = PyList_GET_SIZE(pieces);
    if (!PyType_IsSubtype(cls, &PyTuple_Type) || PyList_GET_SIZE(names) != size ||
        PyList_GET_SIZE(roles) != size) {
        PyErr_SetString(PyExc_ValueError,
                        "plain_segments: cls must be a tuple type, names, pieces and roles "
                        "of one length");
        return NULL;
    }
    int native = native_xxh3(hasher);
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *piece = PyList_GET_ITEM(pieces, i);
        PyObject *hashed;
        if (native && PyBytes_CheckExact(piece)) {
            unsigned char digest[16];
            xxh3_canonical(PyBytes_AS_STRING(piece), (size_t)PyBytes_GET_SIZE(piece), digest);
            hashed = PyBytes_FromStringAndSize((const char *)digest, 16);
        } else {
            hashed = PyObject_CallOneArg(hasher, piece);
        }
        if (hashed == NULL)
            return NULL;
        PyObject *segment = cls->tp_alloc(cls, 7);
        if (segment == NULL) {
            Py_DECREF(hashed);
            return NULL;
        }
        PyObject *fields[7] = {PyList_GET_ITEM(names, i), kind, piece, hashed, Py_False,
                               empty_bytes, PyList_GET_ITEM(roles, i)};
        int atoms = 1;
        for (int k = 0; k < 7; k++) {
            if (k != 3)
                Py_INCREF(fields[k]);
            PyTuple_SET_ITEM(segment, k, fields[k]);
            atoms = atoms && (fields[k] == kind || !PyObject_GC_IsTracked(fields[k]));
        }
        if (atoms && PyObject_GC_IsTracked(segment))
            PyObject_GC_UnTrack(segment);
        int failed = PyList_Append(segments, segment);
        Py_DECREF(segment);
        if (failed)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* record_columns(segments) -> (names, hex digests, hex canonical digests, cumulative
 * tokens) as tuples, or None.
 *
 * `record.build_record`'s columns for the default token estimate, in one pass: each
 * segment's name (item 0), its digest (item 3) and canonical digest (item 5) as hex (b""
 * gives ""), and the running sum of (len(data) + 3) // 4 over its bytes (item 2). None, to
 * take the Python maps, when a segment is not a tuple of at least six items of those
 * types. The tuples hold atoms only: out of cyclic GC. */
static const char record_columns_doc[] =
    "record_columns(segments) -> (names, digests, canonical, cumulative_tokens), or None.";

/* The columns of `record_columns`; with `taken` (three tuples: names, hex digests, hex
 * canonical digests of an earlier record), positions start..stop-1 take those tuples' items
 * instead (a run of messages the request repeats of that record's). None when a segment,
 * or a taken item, is not of the expected type, or the run does not fit. */
static PyObject *columns_of(PyObject *segments, PyObject *const *taken, Py_ssize_t start,
                            Py_ssize_t stop)
{
    if (!PyTuple_CheckExact(segments) && !PyList_CheckExact(segments)) {
        PyErr_SetString(PyExc_TypeError, "record_columns expects a tuple or a list");
        return NULL;
    }
    Py_ssize_t size = Py_SIZE(segments);
    if (taken == NULL) {
        start = stop = 0;
    } else {
        if (start < 0 || stop < start || stop > size)
            Py_RETURN_NONE;
        for (int k = 0; k < 3; k++)
            if (PyTuple_GET_SIZE(taken[k]) < stop)
                Py_RETURN_NONE;
    }
    PyObject *columns[4] = {PyTuple_New(size), PyTuple_New(size), PyTuple_New(size),
                            PyTuple_New(size)};
    PyObject *result = NULL;
    long long total = 0;
    for (int k = 0; k < 4; k++)
        if (columns[k] == NULL)
            goto done;
    for (Py_ssize_t i = 0; i < size; i++) {
        PyObject *segment = PyTuple_CheckExact(segments) ? PyTuple_GET_ITEM(segments, i)
                                                         : PyList_GET_ITEM(segments, i);
        if (!PyTuple_Check(segment) || PyTuple_GET_SIZE(segment) < 6) {
            result = Py_None;
            goto done;
        }
        PyObject *data = PyTuple_GET_ITEM(segment, 2);
        if (!PyBytes_CheckExact(data)) {
            result = Py_None;
            goto done;
        }
        total += (PyBytes_GET_SIZE(data) + 3) >> 2;
        PyObject *running = PyLong_FromLongLong(total);
        if (running == NULL)
            goto done;
        PyTuple_SET_ITEM(columns[3], i, running);
        if (i >= start && i < stop) {
            for (int k = 0; k < 3; k++) {
                PyObject *item = PyTuple_GET_ITEM(taken[k], i);
                if (!PyUnicode_CheckExact(item)) {
                    result = Py_None;
                    goto done;
                }
                Py_INCREF(item);
                PyTuple_SET_ITEM(columns[k], i, item);
            }
            continue;
        }
        PyObject *name = PyTuple_GET_ITEM(segment, 0);
        PyObject *digest = PyTuple_GET_ITEM(segment, 3), *canonical = PyTuple_GET_ITEM(segment, 5);
        if (!PyUnicode_CheckExact(name) || !PyBytes_CheckExact(digest) ||
            !PyBytes_CheckExact(canonical)) {
            result = Py_None;
            goto done;
        }
        PyObject *hexed = hex_of((const unsigned char *)PyBytes_AS_STRING(digest),
                                 PyBytes_GET_SIZE(digest));
        PyObject *canonical_hex = hex_of((const unsigned char *)PyBytes_AS_STRING(canonical),
                                         PyBytes_GET_SIZE(canonical));
        if (hexed == NULL || canonical_hex == NULL) {
            Py_XDECREF(hexed);
            Py_XDECREF(canonical_hex);
            goto done;
        }
        Py_INCREF(name);
        PyTuple_SET_ITEM(columns[0], i, name);
        PyTuple_SET_ITEM(columns[1], i, hexed);
        PyTuple_SET_ITEM(columns[2], i, canonical_hex);
    }
    for (int k = 0; k < 4; k++)
        if (PyObject_GC_IsTracked(columns[k]))
            PyObject_GC_UnTrack(columns[k]); /* str and int only: never in a cycle */
    result = PyTuple_New(4);
    if (result != NULL)
        for (int k = 0; k < 4; k++) {
            PyTuple_SET_ITEM(result, k, columns[k]);
            columns[k] = NULL;
        }
done:
    /* a tuple left part-filled (NULL items) is freed safely: tuple_dealloc skips NULLs */
    for (int k = 0; k < 4; k++)
        Py_XDECREF(columns[k]);
    if (result == Py_None)
        Py_RETURN_NONE;
    return result;
}

static PyObject *py_record_columns(PyObject *self, PyObject *segments)
{
    (void)self;
    return columns_of(segments, NULL, 0, 0);
}

/* record_columns_like(segments, names, digests, canonical, start, stop) -> as
 * `record_columns`, but positions start..stop-1 of the first three columns are the items
 * of `names`, `digests` and `canonical` at the same positions (an earlier record's, for
 * the messages this request repeats of it: `record.build_record`'s `like`), not made
 * again; the cumulative tokens still come from every segment's bytes. None as there, or
 * when those tuples are shorter than `stop` or hold an item that is not a str. */
static const char record_columns_like_doc[] =
    "record_columns_like(segments, names, digests, canonical, start, stop) -> (names, "
    "digests, canonical, cumulative_tokens) with start..stop taken from the given columns, "
    "or None.";

static PyObject *py_record_columns_like(PyObject *self, PyObject *args)
{
    PyObject *segments, *taken[3];
    Py_ssize_t start, stop;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!O!O!nn:record_columns_like", &segments, &PyTuple_Type,
                          &taken[0], &PyTuple_Type, &taken[1], &PyTuple_Type, &taken[2], &start,
                          &stop))
        return NULL;
    return columns_of(segments, taken, start, stop);
}

/* common_length(a, b) -> how many leading items two tuples of str share, or None.
 *
 * `compare.common_prefix` for long records in one pass: an item the same object in both
 * (an agent step's repeated digests are its previous record's) costs a pointer compare,
 * another str a `PyUnicode_Compare`. None, for the Python search, when an item compared
 * is not a str. */
static const char common_length_doc[] =
    "common_length(a, b) -> the length of the common prefix of two tuples of str, or None.";

static PyObject *py_common_length(PyObject *self, PyObject *args)
{
    PyObject *a, *b;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!:common_length", &PyTuple_Type, &a, &PyTuple_Type, &b))
        return NULL;
    Py_ssize_t size = PyTuple_GET_SIZE(a) < PyTuple_GET_SIZE(b) ? PyTuple_GET_SIZE(a)
                                                                 : PyTuple_GET_SIZE(b);
    Py_ssize_t i = 0;
    for (; i < size; i++) {
        PyObject *x = PyTuple_GET_ITEM(a, i), *y = PyTuple_GET_ITEM(b, i);
        if (!PyUnicode_CheckExact(x) || !PyUnicode_CheckExact(y))
            Py_RETURN_NONE;
        if (x == y)
            continue;
        int order = PyUnicode_Compare(x, y);
        if (order == -1 && PyErr_Occurred())
            return NULL;
        if (order != 0)
            break;
    }
    return PyLong_FromSsize_t(i);
}

/* first_long(values, limit) -> the index of the first dict whose "content" is a str of
 * more than `limit` characters, or None: `segments._first_long` without its loop. Exact
 * types, as there (`type(v) is dict`, `type(c) is str`). */
static const char first_long_doc[] =
    "first_long(values, limit) -> index of the first message with a str content over limit "
    "characters, or None.";


static PyObject *py_first_long(PyObject *self, PyObject *args)
{
    PyObject *values;
    Py_ssize_t limit;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!n:first_long", &PyList_Type, &values, &limit))
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
        PyObject *value = PyList_GET_ITEM(values, i);
        if (!PyDict_CheckExact(value))
            continue;
        PyObject *content = PyDict_GetItemWithError(value, content_key);
        if (content == NULL) {
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
        if (PyUnicode_CheckExact(content) && PyUnicode_GET_LENGTH(content) > limit)
            return PyLong_FromSsize_t(i);
    }
    Py_RETURN_NONE;
}

/* roles(values, start, stop) -> [the str "role" of each dict of values[start:stop], or ""]:
 * `segments._plain_segments`' list without its loop (exact types, as there). */
static const char roles_doc[] =
    "roles(values, start, stop) -> list of each message's str role, or \"\".";

static PyObject *py_roles(PyObject *self, PyObject *args)
{
    PyObject *values;
    Py_ssize_t start, stop;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!nn:roles", &PyList_Type, &values, &start, &stop))
        return NULL;
    Py_ssize_t size = PyList_GET_SIZE(values);
    start = start < 0 ? 0 : start > size ? size : start;
    stop = stop > size ? size : stop < start ? start : stop;
    PyObject *roles = PyList_New(stop - start);
    if (roles == NULL)
        return NULL;
    for (Py_ssize_t i = start; i < stop; i++) {
        PyObject *value = PyList_GET_ITEM(values, i), *role = NULL;
        if (PyDict_CheckExact(value)) {
            role = PyDict_GetItemWithError(value, role_key);
            if (role == NULL && PyErr_Occurred()) {
                Py_DECREF(roles);
                return NULL;
            }
        }
        if (role == NULL || !PyUnicode_CheckExact(role))
            role = empty_str;
        Py_INCREF(role);
        PyList_SET_ITEM(roles, i - start, role);
    }
    return roles;
}

static PyMethodDef methods[] = {
    {"next_candidate", py_next_candidate, METH_VARARGS, next_candidate_doc},
    {"flag_candidates", py_flag_candidates, METH_O, flag_candidates_doc},
    {"untrack_tuples", py_untrack_tuples, METH_VARARGS, untrack_tuples_doc},
    {"untrack_flat", py_untrack_flat, METH_O, untrack_flat_doc},
    {"untracked_tuple", py_untracked_tuple, METH_VARARGS, untracked_tuple_doc},
    {"moved_tuple", py_moved_tuple, METH_VARARGS, moved_tuple_doc},
    {"take_items", py_take_items, METH_VARARGS, take_items_doc},
    {"chain_hex", py_chain_hex, METH_VARARGS, chain_hex_doc},
    {"array_items", py_array_items, METH_O, array_items_doc},
    {"canonical_items", py_canonical_items, METH_VARARGS, canonical_items_doc},
    {"untrack_items", py_untrack_items, METH_O, untrack_items_doc},
    {"bind_xxh3", py_bind_xxh3, METH_VARARGS, bind_xxh3_doc},
    {"plain_segments", py_plain_segments, METH_VARARGS, plain_segments_doc},
    {"record_columns", py_record_columns, METH_O, record_columns_doc},
    {"record_columns_like", py_record_columns_like, METH_VARARGS, record_columns_like_doc},
    {"common_length", py_common_length, METH_VARARGS, common_length_doc},
    {"first_long", py_first_long, METH_VARARGS, first_long_doc},
    {"roles", py_roles, METH_VARARGS, roles_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_locate", "Native candidate locator for the prefix scan.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__locate(void)
{
    init_classes();
    init_time_first();
    init_hex_values();
    content_key = PyUnicode_InternFromString("content");
    role_key = PyUnicode_InternFromString("role");
    empty_str = PyUnicode_InternFromString("");
    empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
    if (content_key == NULL || role_key == NULL || empty_str == NULL || empty_bytes == NULL)
        return NULL;
    return PyModule_Create(&module);
}
