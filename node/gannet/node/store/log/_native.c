/*
 * gannet.node.store.log._native — the native batch encoder of the store's put path.
 *
 * A C extension against the CPython API (built by setuptools in `make install`; optional: when
 * it does not build, the store runs on the Python path and says so once in its log). It mirrors,
 * byte for byte and error for error, these Python functions, which stay the reference and the
 * fallback (selected by gannet.node.store.log.native; GANNET_NATIVE=0 forces Python):
 *
 *   encode_all           CommitLog.encode_all + packing.record_fields   (store/log/commitlog.py,
 *                                                                         store/log/packing.py)
 *   lay_out              CommitLog._lay_out + packing.pack_record_into  (same modules)
 *   index_items          the key loop of IndexService.build_index_batch (store/queues/index_service.py)
 *   add_index_items      IndexFile.add_items                            (store/queues/index_files.py)
 *   dispatch_infos       dispatch_infos_of                              (store/message_store.py)
 *   queue_units          the loop of MessageStore._dispatch_consume_queues with
 *                        ConsumeQueue.put_units (store/queues/consume_queues.py)
 *   take_handoff         the hand-off steps of DispatchService._dispatch_batch
 *                                                                       (store/queues/dispatching.py)
 *   record_starts        the record-boundary walk of a segment's bulk parser
 *                                                      (pipeline/gannet/pipeline/columns.py)
 *   bodies_crc_bad       the body-CRC loop of that parser (same module)
 *
 * The record layout is documented in store/log/records.py, the index-file layout in
 * store/queues/index_files.py. Whatever this code does not handle on its fast path (a field of
 * an unusual type, a value out of range, an oversize body or property string, an unencodable
 * string) it hands to the Python function `fallback` for that message, so the values and the
 * errors are the Python path's by construction.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define CRC32_RESERVED_LENGTH 20
#define END_FILE_MIN_BLANK_LENGTH 8
#define PROPERTIES_LENGTH_MAX_BYTES 32767
#define SYSFLAG_BORNHOST_V6 0x10
#define SYSFLAG_STOREHOST_V6 0x20
#define SYSFLAG_TRANSACTION_PREPARED_TYPE 0x4
#define SYSFLAG_TRANSACTION_ROLLBACK_TYPE 0xC
#define MAGIC_V1 (-626843481)
#define MAGIC_V2 (-626843477)
#define FIELDS_COUNT 13
#define INDEX_HEADER_SIZE 40
#define INDEX_SLOT_SIZE 4
#define INDEX_ITEM_SIZE 20
#define INT32_MAX_VALUE 2147483647LL
#define NATIVE_VERSION 2

static const char TRANSIENT_PREFIX[] = "__RMQ.TRANSIENT.";
#define TRANSIENT_PREFIX_LEN (sizeof(TRANSIENT_PREFIX) - 1)

static PyObject *s_topic, *s_body, *s_queue_id, *s_flag, *s_properties, *s_sys_flag,
    *s_born_timestamp_ms, *s_born_host, *s_store_host, *s_reconsume_times,
    *s_prepared_transaction_offset, *magic_v1, *magic_v2;

/* ---------------------------------------------------------------- big-endian writes */
static inline void put_i32(unsigned char *p, int64_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24);
    p[1] = (unsigned char)(u >> 16);
    p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

static inline void put_i64(unsigned char *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)u;
        u >>= 8;
    }
}

static inline int32_t get_i32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

/* An int of at most 64 bits in [lo, hi]; 0 when the object is no exact int or is out of
 * range (the caller then takes the Python path, which raises the Python path's error). */
static int exact_int_in(PyObject *o, long long lo, long long hi, long long *out) {
    if (!PyLong_CheckExact(o))
        return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* ---------------------------------------------------------------- encode_all */
typedef struct {
    Py_ssize_t body_max;
    int append_crc;
    PyObject *encode_host;  /* records.encode_host(host, port) -> bytes (lru-cached) */
    PyObject *topic_field;  /* records.topic_field_of(topic, False) -> (v2, field) */
    PyObject *fallback;     /* packing.record_fields bound to the batch's settings */
    /* last-seen caches (borrowed keys kept alive by the references we hold) */
    PyObject *born_key, *born_val, *store_key, *store_val, *topic_key, *topic_val;
    int topic_v2;
} Enc;

static void enc_clear(Enc *e) {
    Py_CLEAR(e->born_key);
    Py_CLEAR(e->born_val);
    Py_CLEAR(e->store_key);
    Py_CLEAR(e->store_val);
    Py_CLEAR(e->topic_key);
    Py_CLEAR(e->topic_val);
}

/* New reference to the encoded host of a (host, port) tuple, or NULL (error set). */
static PyObject *host_bytes(Enc *e, PyObject *hp, PyObject **key, PyObject **val) {
    if (*key != NULL) {
        if (*key == hp) {
            Py_INCREF(*val);
            return *val;
        }
        int eq = PyObject_RichCompareBool(*key, hp, Py_EQ);
        if (eq < 0)
            return NULL;
        if (eq) {
            Py_INCREF(*val);
            return *val;
        }
    }
    if (!PyTuple_CheckExact(hp) || PyTuple_GET_SIZE(hp) != 2) {
        PyErr_SetString(PyExc_TypeError, "host is not a (host, port) pair");
        return NULL;
    }
    PyObject *b = PyObject_CallFunctionObjArgs(e->encode_host, PyTuple_GET_ITEM(hp, 0),
                                               PyTuple_GET_ITEM(hp, 1), NULL);
    if (b == NULL)
        return NULL;
    if (!PyBytes_CheckExact(b) || (PyBytes_GET_SIZE(b) != 8 && PyBytes_GET_SIZE(b) != 20)) {
        Py_DECREF(b);
        PyErr_SetString(PyExc_ValueError, "encoded host is not 8 or 20 bytes");
        return NULL;
    }
    Py_INCREF(hp);
    Py_XSETREF(*key, hp);
    Py_INCREF(b);
    Py_XSETREF(*val, b);
    return b;
}

/* Borrowed TOPIC field (length + bytes) of a topic; sets *v2. NULL with an error set. */
static PyObject *topic_field_of(Enc *e, PyObject *topic, int *v2) {
    if (e->topic_key != NULL && (e->topic_key == topic ||
                                 (PyUnicode_CheckExact(topic) &&
                                  PyUnicode_Compare(e->topic_key, topic) == 0))) {
        *v2 = e->topic_v2;
        return e->topic_val;
    }
    if (!PyUnicode_CheckExact(topic)) {
        PyErr_SetString(PyExc_TypeError, "topic is not a str");
        return NULL;
    }
    PyObject *r = PyObject_CallFunctionObjArgs(e->topic_field, topic, Py_False, NULL);
    if (r == NULL)
        return NULL;
    if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2 ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(r, 1))) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "topic_field_of returned an unexpected value");
        return NULL;
    }
    int is_v2 = PyObject_IsTrue(PyTuple_GET_ITEM(r, 0));
    PyObject *field = PyTuple_GET_ITEM(r, 1);
    Py_INCREF(field);
    Py_DECREF(r);
    Py_INCREF(topic);
    Py_XSETREF(e->topic_key, topic);
    Py_XSETREF(e->topic_val, field);
    e->topic_v2 = is_v2;
    *v2 = is_v2;
    return field;
}

/* The PROPERTIES text of a map (transient keys left out) as a new bytes object of the text
 * plus `reserve` zero bytes; NULL with an error set (non-str entries, unencodable text). */
static PyObject *properties_bytes(PyObject *properties, Py_ssize_t reserve) {
    Py_ssize_t total = 0, pos = 0;
    PyObject *k, *v;
    if (!PyDict_CheckExact(properties)) {
        PyErr_SetString(PyExc_TypeError, "properties is not a dict");
        return NULL;
    }
    while (PyDict_Next(properties, &pos, &k, &v)) {
        Py_ssize_t kl, vl;
        if (!PyUnicode_CheckExact(k) || !PyUnicode_CheckExact(v)) {
            PyErr_SetString(PyExc_TypeError, "a property name or value is not a str");
            return NULL;
        }
        const char *ks = PyUnicode_AsUTF8AndSize(k, &kl);
        if (ks == NULL || PyUnicode_AsUTF8AndSize(v, &vl) == NULL)
            return NULL;
        if ((size_t)kl >= TRANSIENT_PREFIX_LEN &&
            memcmp(ks, TRANSIENT_PREFIX, TRANSIENT_PREFIX_LEN) == 0)
            continue;
        total += kl + vl + 2;
    }
    if (total + reserve > PROPERTIES_LENGTH_MAX_BYTES) {
        PyErr_SetString(PyExc_ValueError, "properties too large");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total + reserve);
    if (out == NULL)
        return NULL;
    char *w = PyBytes_AS_STRING(out);
    pos = 0;
    while (PyDict_Next(properties, &pos, &k, &v)) {
        Py_ssize_t kl, vl;
        const char *ks = PyUnicode_AsUTF8AndSize(k, &kl);
        const char *vs = PyUnicode_AsUTF8AndSize(v, &vl);
        if ((size_t)kl >= TRANSIENT_PREFIX_LEN &&
            memcmp(ks, TRANSIENT_PREFIX, TRANSIENT_PREFIX_LEN) == 0)
            continue;
        memcpy(w, ks, (size_t)kl);
        w += kl;
        *w++ = '\x01';
        memcpy(w, vs, (size_t)vl);
        w += vl;
        *w++ = '\x02';
    }
    memset(w, 0, (size_t)reserve);
    return out;
}

#define GET(var, name)                    \
    if ((var = PyObject_GetAttr(msg, name)) == NULL) \
        goto fail;

/* New reference to the fields tuple of one message on the fast path; NULL with an error set
 * when the message needs the Python path (the caller clears the error and falls back). */
static PyObject *fast_fields(Enc *e, PyObject *msg) {
    PyObject *result = NULL, *born = NULL, *store = NULL, *tail = NULL, *props = NULL;
    PyObject *topic = NULL, *body = NULL, *queue_id = NULL, *flag = NULL, *properties = NULL,
             *sys_flag_o = NULL, *born_ms = NULL, *born_host = NULL, *store_host = NULL,
             *reconsume = NULL, *prepared = NULL;
    GET(topic, s_topic)
    GET(body, s_body)
    GET(queue_id, s_queue_id)
    GET(flag, s_flag)
    GET(properties, s_properties)
    GET(sys_flag_o, s_sys_flag)
    GET(born_ms, s_born_timestamp_ms)
    GET(born_host, s_born_host)
    GET(store_host, s_store_host)
    GET(reconsume, s_reconsume_times)
    GET(prepared, s_prepared_transaction_offset)
    long long qv, fv, sf, rv, bv, pv;
    const long long i32lo = -2147483648LL, i32hi = 2147483647LL;
    if (!exact_int_in(queue_id, i32lo, i32hi, &qv) || !exact_int_in(flag, i32lo, i32hi, &fv) ||
        !exact_int_in(sys_flag_o, i32lo, i32hi, &sf) ||
        !exact_int_in(reconsume, i32lo, i32hi, &rv) ||
        !exact_int_in(born_ms, LLONG_MIN, LLONG_MAX, &bv) ||
        !exact_int_in(prepared, LLONG_MIN, LLONG_MAX, &pv)) {
        PyErr_SetString(PyExc_ValueError, "a field is out of range or not an int");
        goto fail;
    }
    (void)qv, (void)fv, (void)rv, (void)bv, (void)pv;
    if (!PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) > e->body_max) {
        PyErr_SetString(PyExc_ValueError, "body is not bytes or too large");
        goto fail;
    }
    born = host_bytes(e, born_host, &e->born_key, &e->born_val);
    if (born == NULL)
        goto fail;
    store = host_bytes(e, store_host, &e->store_key, &e->store_val);
    if (store == NULL)
        goto fail;
    sf &= ~(long long)(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6);
    if (PyBytes_GET_SIZE(born) == 20)
        sf |= SYSFLAG_BORNHOST_V6;
    if (PyBytes_GET_SIZE(store) == 20)
        sf |= SYSFLAG_STOREHOST_V6;
    int v2 = 0;
    PyObject *tfield = topic_field_of(e, topic, &v2); /* borrowed */
    if (tfield == NULL)
        goto fail;
    props = properties_bytes(properties, e->append_crc ? CRC32_RESERVED_LENGTH : 0);
    if (props == NULL)
        goto fail;
    Py_ssize_t tl = PyBytes_GET_SIZE(tfield), pl = PyBytes_GET_SIZE(props);
    tail = PyBytes_FromStringAndSize(NULL, tl + 2 + pl);
    if (tail == NULL)
        goto fail;
    unsigned char *t = (unsigned char *)PyBytes_AS_STRING(tail);
    memcpy(t, PyBytes_AS_STRING(tfield), (size_t)tl);
    t[tl] = (unsigned char)((pl >> 8) & 0xFF);
    t[tl + 1] = (unsigned char)(pl & 0xFF);
    memcpy(t + tl + 2, PyBytes_AS_STRING(props), (size_t)pl);
    Py_ssize_t bl = PyBytes_GET_SIZE(body);
    long long total = 72 + PyBytes_GET_SIZE(born) + PyBytes_GET_SIZE(store) + bl +
                      PyBytes_GET_SIZE(tail);
    unsigned long crc = crc32_z(0L, (const Bytef *)PyBytes_AS_STRING(body), (z_size_t)bl);
    result = PyTuple_New(FIELDS_COUNT);
    if (result == NULL)
        goto fail;
    PyObject *total_o = PyLong_FromLongLong(total);
    PyObject *crc_o = PyLong_FromUnsignedLong(crc & 0x7FFFFFFFUL);
    PyObject *sf_o = PyLong_FromLongLong(sf);
    if (total_o == NULL || crc_o == NULL || sf_o == NULL) {
        Py_XDECREF(total_o);
        Py_XDECREF(crc_o);
        Py_XDECREF(sf_o);
        Py_CLEAR(result);
        goto fail;
    }
    PyObject *magic = v2 ? magic_v2 : magic_v1;
    Py_INCREF(magic);
    Py_INCREF(queue_id);
    Py_INCREF(flag);
    Py_INCREF(born_ms);
    Py_INCREF(reconsume);
    Py_INCREF(prepared);
    Py_INCREF(body);
    PyTuple_SET_ITEM(result, 0, total_o);
    PyTuple_SET_ITEM(result, 1, magic);
    PyTuple_SET_ITEM(result, 2, crc_o);
    PyTuple_SET_ITEM(result, 3, queue_id);
    PyTuple_SET_ITEM(result, 4, flag);
    PyTuple_SET_ITEM(result, 5, sf_o);
    PyTuple_SET_ITEM(result, 6, born_ms);
    PyTuple_SET_ITEM(result, 7, born);
    PyTuple_SET_ITEM(result, 8, store);
    PyTuple_SET_ITEM(result, 9, reconsume);
    PyTuple_SET_ITEM(result, 10, prepared);
    PyTuple_SET_ITEM(result, 11, body);
    PyTuple_SET_ITEM(result, 12, tail);
    born = store = tail = NULL; /* owned by the tuple now */
fail:
    Py_XDECREF(born);
    Py_XDECREF(store);
    Py_XDECREF(tail);
    Py_XDECREF(props);
    Py_XDECREF(topic);
    Py_XDECREF(body);
    Py_XDECREF(queue_id);
    Py_XDECREF(flag);
    Py_XDECREF(properties);
    Py_XDECREF(sys_flag_o);
    Py_XDECREF(born_ms);
    Py_XDECREF(born_host);
    Py_XDECREF(store_host);
    Py_XDECREF(reconsume);
    Py_XDECREF(prepared);
    return result;
}
#undef GET

static PyObject *encode_all(PyObject *self, PyObject *args) {
    PyObject *msgs, *encode_host, *topic_field, *fallback, *too_large;
    Py_ssize_t body_max;
    int append_crc;
    long long limit, file_size;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!npLLOOOO:encode_all", &PyList_Type, &msgs, &body_max,
                          &append_crc, &limit, &file_size, &encode_host, &topic_field, &fallback,
                          &too_large))
        return NULL;
    Enc e = {body_max, append_crc, encode_host, topic_field, fallback,
             NULL,     NULL,       NULL,        NULL,        NULL,     NULL, 0};
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *msg = PyList_GET_ITEM(msgs, i);
        PyObject *fields = fast_fields(&e, msg);
        if (fields == NULL) {
            PyErr_Clear();
            fields = PyObject_CallOneArg(fallback, msg);
            if (fields == NULL)
                goto fail;
            if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) != FIELDS_COUNT) {
                Py_DECREF(fields);
                PyErr_SetString(PyExc_TypeError, "record_fields returned an unexpected value");
                goto fail;
            }
        }
        long long total = PyLong_AsLongLong(PyTuple_GET_ITEM(fields, 0));
        if (total == -1 && PyErr_Occurred()) {
            Py_DECREF(fields);
            goto fail;
        }
        if (total > limit) {
            Py_DECREF(fields);
            PyErr_Format(too_large,
                         "record of %lld bytes does not fit a commit-log file of %lld bytes",
                         total, file_size);
            goto fail;
        }
        /* Only non-transactional and commit-type records (transaction bits 0x0, 0x8) take a
         * queue offset. */
        PyObject *key = NULL;
        PyObject *sys_flag = PyObject_GetAttr(msg, s_sys_flag);
        PyObject *topic = sys_flag ? PyObject_GetAttr(msg, s_topic) : NULL;
        PyObject *queue_id = topic ? PyObject_GetAttr(msg, s_queue_id) : NULL;
        if (queue_id != NULL) {
            long long sf = PyLong_AsLongLong(sys_flag);
            if (!(sf == -1 && PyErr_Occurred())) {
                if (sf & SYSFLAG_TRANSACTION_PREPARED_TYPE) {
                    key = Py_None;
                    Py_INCREF(key);
                } else if (PyLong_CheckExact(queue_id)) {
                    key = PyUnicode_FromFormat("%S-%S", topic, queue_id);
                } else {
                    PyObject *qs = PyObject_Format(queue_id, NULL);
                    key = qs ? PyUnicode_FromFormat("%S-%U", topic, qs) : NULL;
                    Py_XDECREF(qs);
                }
            }
        }
        Py_XDECREF(sys_flag);
        Py_XDECREF(topic);
        Py_XDECREF(queue_id);
        if (key == NULL) {
            Py_DECREF(fields);
            goto fail;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(fields);
            Py_DECREF(key);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, fields);
        PyTuple_SET_ITEM(pair, 1, key);
        PyList_SET_ITEM(out, i, pair);
    }
    enc_clear(&e);
    return out;
fail:
    enc_clear(&e);
    Py_DECREF(out);
    return NULL;
}

/* ---------------------------------------------------------------- lay_out */
/* "__CRC32#" \x01 ten digits least-significant first (0-padded) \x02 */
static void crc_property_tail(unsigned char *p, uint32_t crc) {
    memcpy(p, "__CRC32#\x01", 9);
    for (int i = 0; i < 10; i++) {
        p[9 + i] = '0';
    }
    int i = 0;
    do {
        p[9 + i++] = (unsigned char)('0' + crc % 10);
        crc /= 10;
    } while (crc != 0 && i < 10);
    p[19] = '\x02';
}

/* Pack one record (fields tuple) at p, whose room is exactly its TOTALSIZE. 0 on success. */
static int pack_record(unsigned char *p, PyObject *fields, long long total, int64_t queue_offset,
                       int64_t physical_offset, int64_t store_ts, int append_crc) {
    long long v[FIELDS_COUNT];
    static const int ints[] = {1, 2, 3, 4, 5, 6, 9, 10};
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        v[ints[i]] = PyLong_AsLongLong(PyTuple_GET_ITEM(fields, ints[i]));
        if (v[ints[i]] == -1 && PyErr_Occurred())
            return -1;
    }
    PyObject *born = PyTuple_GET_ITEM(fields, 7), *store = PyTuple_GET_ITEM(fields, 8),
             *tail = PyTuple_GET_ITEM(fields, 12);
    if (!PyBytes_Check(born) || !PyBytes_Check(store) || !PyBytes_Check(tail)) {
        PyErr_SetString(PyExc_TypeError, "record fields: hosts and tail must be bytes");
        return -1;
    }
    Py_buffer body;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(fields, 11), &body, PyBUF_SIMPLE) < 0)
        return -1;
    Py_ssize_t bl = PyBytes_GET_SIZE(born), sl = PyBytes_GET_SIZE(store),
               tl = PyBytes_GET_SIZE(tail);
    if (72 + bl + sl + body.len + tl != total || body.len > INT32_MAX_VALUE) {
        PyBuffer_Release(&body);
        PyErr_SetString(PyExc_ValueError, "record fields do not add up to their TOTALSIZE");
        return -1;
    }
    put_i32(p, total);
    put_i32(p + 4, v[1]);
    put_i32(p + 8, v[2]);
    put_i32(p + 12, v[3]);
    put_i32(p + 16, v[4]);
    put_i64(p + 20, queue_offset);
    put_i64(p + 28, physical_offset);
    put_i32(p + 36, v[5]);
    put_i64(p + 40, v[6]);
    unsigned char *w = p + 48;
    memcpy(w, PyBytes_AS_STRING(born), (size_t)bl);
    w += bl;
    put_i64(w, store_ts);
    w += 8;
    memcpy(w, PyBytes_AS_STRING(store), (size_t)sl);
    w += sl;
    put_i32(w, v[9]);
    put_i64(w + 4, v[10]);
    put_i32(w + 12, body.len);
    w += 16;
    memcpy(w, body.buf, (size_t)body.len);
    w += body.len;
    PyBuffer_Release(&body);
    memcpy(w, PyBytes_AS_STRING(tail), (size_t)tl);
    if (append_crc) {
        if (total < 72 + CRC32_RESERVED_LENGTH) {
            PyErr_SetString(PyExc_ValueError, "record too short for its CRC property");
            return -1;
        }
        long long covered = total - CRC32_RESERVED_LENGTH;
        uLong crc = crc32_z(0L, p, (z_size_t)covered);
        crc_property_tail(p + covered, (uint32_t)(crc & 0x7FFFFFFFUL));
    }
    return 0;
}

static PyObject *new_result(PyTypeObject *type, long long offset, long long size,
                            long long queue_offset, PyObject *ts, PyObject *host,
                            PyObject *port) {
    PyObject *r = type->tp_alloc(type, 6);
    if (r == NULL)
        return NULL;
    PyObject *a = PyLong_FromLongLong(offset), *b = PyLong_FromLongLong(size),
             *c = PyLong_FromLongLong(queue_offset);
    if (a == NULL || b == NULL || c == NULL) {
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
        Py_DECREF(r);
        return NULL;
    }
    Py_INCREF(ts);
    Py_INCREF(host);
    Py_INCREF(port);
    PyTuple_SET_ITEM(r, 0, a);
    PyTuple_SET_ITEM(r, 1, b);
    PyTuple_SET_ITEM(r, 2, c);
    PyTuple_SET_ITEM(r, 3, ts);
    PyTuple_SET_ITEM(r, 4, host);
    PyTuple_SET_ITEM(r, 5, port);
    return r;
}

static PyObject *lay_out(PyObject *self, PyObject *args) {
    PyObject *batch, *offsets, *ts_o, *host, *port;
    PyTypeObject *result_type;
    long long offset, room, file_size;
    int append_crc;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!LLLOpOOO!:lay_out", &PyList_Type, &batch, &PyDict_Type,
                          &offsets, &offset, &room, &file_size, &ts_o, &append_crc, &host, &port,
                          &PyType_Type, &result_type))
        return NULL;
    if (!PyType_IsSubtype(result_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "result_type must be a tuple subclass");
        return NULL;
    }
    long long ts = PyLong_AsLongLong(ts_o);
    if (ts == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(batch);
    long long *sizes = PyMem_Malloc(sizeof(long long) * (size_t)(n ? n : 1));
    if (sizes == NULL)
        return PyErr_NoMemory();
    PyObject *plan = NULL, *results = NULL, *reserved = NULL, *buf = NULL, *out = NULL;
    Py_ssize_t *seg_end = NULL;
    long long *seg_bytes = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *enc = PyList_GET_ITEM(batch, i);
        if (!PyTuple_Check(enc) || PyTuple_GET_SIZE(enc) != 2 ||
            !PyTuple_Check(PyTuple_GET_ITEM(enc, 0)) ||
            PyTuple_GET_SIZE(PyTuple_GET_ITEM(enc, 0)) != FIELDS_COUNT) {
            PyErr_SetString(PyExc_TypeError, "lay_out takes (record fields, queue key) pairs");
            goto done;
        }
        sizes[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(PyTuple_GET_ITEM(enc, 0), 0));
        if (sizes[i] == -1 && PyErr_Occurred())
            goto done;
        if (sizes[i] <= 0) {
            PyErr_SetString(PyExc_ValueError, "record size must be positive");
            goto done;
        }
    }
    plan = PyList_New(0);
    results = PyList_New(n);
    reserved = PyDict_New();
    if (plan == NULL || results == NULL || reserved == NULL)
        goto done;
    /* Pass 1, the segments (one per file touched): a record starts a new segment when it plus
     * the 8-byte minimum BLANK does not fit the room left, exactly as CommitLog._lay_out. */
    seg_end = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n + 1));
    seg_bytes = PyMem_Malloc(sizeof(long long) * (size_t)(n + 1));
    if (seg_end == NULL || seg_bytes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t segs = 0;
    long long r = room, acc = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (sizes[i] + END_FILE_MIN_BLANK_LENGTH > r) {
            seg_end[segs] = i;
            seg_bytes[segs++] = acc;
            acc = 0;
            r = file_size;
        }
        acc += sizes[i];
        r -= sizes[i];
    }
    seg_end[segs] = n;
    seg_bytes[segs++] = acc;
    /* Pass 2: pack each segment into its own buffer. */
    Py_ssize_t i = 0;
    for (Py_ssize_t k = 0; k < segs; k++) {
        if (k > 0) {
            offset += room; /* the BLANK closes the file; the next one starts here */
            room = file_size;
        }
        buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)seg_bytes[k]);
        if (buf == NULL)
            goto done;
        unsigned char *b = (unsigned char *)PyByteArray_AS_STRING(buf);
        long long pos = 0;
        Py_ssize_t first = i;
        for (; i < seg_end[k]; i++) {
            PyObject *enc = PyList_GET_ITEM(batch, i);
            PyObject *fields = PyTuple_GET_ITEM(enc, 0), *key = PyTuple_GET_ITEM(enc, 1);
            long long queue_offset = 0;
            if (key != Py_None) {
                PyObject *q = PyDict_GetItemWithError(reserved, key);
                if (q == NULL) {
                    if (PyErr_Occurred())
                        goto done;
                    q = PyDict_GetItemWithError(offsets, key);
                    if (q == NULL && PyErr_Occurred())
                        goto done;
                }
                if (q != NULL) {
                    queue_offset = PyLong_AsLongLong(q);
                    if (queue_offset == -1 && PyErr_Occurred())
                        goto done;
                }
                PyObject *next = PyLong_FromLongLong(queue_offset + 1);
                if (next == NULL || PyDict_SetItem(reserved, key, next) < 0) {
                    Py_XDECREF(next);
                    goto done;
                }
                Py_DECREF(next);
            }
            if (pack_record(b + pos, fields, sizes[i], queue_offset, offset, ts, append_crc) < 0)
                goto done;
            PyObject *res =
                new_result(result_type, offset, sizes[i], queue_offset, ts_o, host, port);
            if (res == NULL)
                goto done;
            PyList_SET_ITEM(results, i, res);
            pos += sizes[i];
            offset += sizes[i];
            room -= sizes[i];
        }
        PyObject *entry = Py_BuildValue("(OOn)", k > 0 ? Py_True : Py_False, buf, i - first);
        if (entry == NULL || PyList_Append(plan, entry) < 0) {
            Py_XDECREF(entry);
            goto done;
        }
        Py_DECREF(entry);
        Py_CLEAR(buf);
    }
    out = PyTuple_Pack(3, plan, results, reserved);
done:
    PyMem_Free(sizes);
    PyMem_Free(seg_end);
    PyMem_Free(seg_bytes);
    Py_XDECREF(buf);
    Py_XDECREF(plan);
    Py_XDECREF(results);
    Py_XDECREF(reserved);
    return out;
}

/* ---------------------------------------------------------------- index */
/* index_key_hash of topic#key for ASCII text (Java String.hashCode over bytes, abs, and
 * Integer.MIN_VALUE -> 0). */
static long long index_hash_ascii(const unsigned char *topic, Py_ssize_t tn,
                                  const unsigned char *key, Py_ssize_t kn) {
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < tn; i++)
        h = 31u * h + topic[i];
    h = 31u * h + (uint32_t)'#';
    for (Py_ssize_t i = 0; i < kn; i++)
        h = 31u * h + key[i];
    if (h & 0x80000000u)
        return h == 0x80000000u ? 0 : (long long)(0x100000000ULL - h);
    return (long long)h;
}

/* Append (hash of topic#key, offset, stored) to items. key_hash is the Python index_key_hash,
 * used for text that is not ASCII (its UTF-16 and error rules stay Python's). */
static int add_key_item(PyObject *items, PyObject *topic, PyObject *keys, Py_ssize_t from,
                        Py_ssize_t to, PyObject *offset, PyObject *stored, PyObject *key_hash) {
    PyObject *h;
    if (PyUnicode_IS_ASCII(topic) && PyUnicode_IS_ASCII(keys)) {
        h = PyLong_FromLongLong(index_hash_ascii(
            PyUnicode_1BYTE_DATA(topic), PyUnicode_GET_LENGTH(topic),
            PyUnicode_1BYTE_DATA(keys) + from, to - from));
    } else {
        PyObject *part = PyUnicode_Substring(keys, from, to);
        PyObject *text = part ? PyUnicode_FromFormat("%U#%U", topic, part) : NULL;
        Py_XDECREF(part);
        h = text ? PyObject_CallOneArg(key_hash, text) : NULL;
        Py_XDECREF(text);
    }
    if (h == NULL)
        return -1;
    PyObject *item = PyTuple_New(3);
    if (item == NULL) {
        Py_DECREF(h);
        return -1;
    }
    Py_INCREF(offset);
    Py_INCREF(stored);
    PyTuple_SET_ITEM(item, 0, h);
    PyTuple_SET_ITEM(item, 1, offset);
    PyTuple_SET_ITEM(item, 2, stored);
    int rc = PyList_Append(items, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *index_items(PyObject *self, PyObject *args) {
    PyObject *infos, *key_hash;
    long long end_phy_offset;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!LO:index_items", &PyList_Type, &infos, &end_phy_offset,
                          &key_hash))
        return NULL;
    PyObject *items = PyList_New(0);
    if (items == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(infos);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *info = PyList_GET_ITEM(infos, i);
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) < 12) {
            PyErr_SetString(PyExc_TypeError, "index_items takes DispatchInfo tuples");
            goto fail;
        }
        PyObject *topic = PyTuple_GET_ITEM(info, 0), *offset_o = PyTuple_GET_ITEM(info, 2),
                 *stored = PyTuple_GET_ITEM(info, 5), *keys = PyTuple_GET_ITEM(info, 7),
                 *uniq = PyTuple_GET_ITEM(info, 8);
        long long offset = PyLong_AsLongLong(offset_o);
        if (offset == -1 && PyErr_Occurred())
            goto fail;
        if (offset < end_phy_offset)
            continue; /* already indexed */
        long long sys_flag = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 9));
        if (sys_flag == -1 && PyErr_Occurred())
            goto fail;
        if ((sys_flag & 0xC) == SYSFLAG_TRANSACTION_ROLLBACK_TYPE)
            continue;
        if (!PyUnicode_Check(topic)) {
            PyErr_SetString(PyExc_TypeError, "DispatchInfo.topic is not a str");
            goto fail;
        }
        Py_ssize_t count = PyList_GET_SIZE(items);
        if (uniq != Py_None) {
            if (!PyUnicode_Check(uniq)) {
                PyErr_SetString(PyExc_TypeError, "DispatchInfo.uniq_key is not a str");
                goto fail;
            }
            if (add_key_item(items, topic, uniq, 0, PyUnicode_GET_LENGTH(uniq), offset_o, stored,
                             key_hash) < 0)
                goto fail;
        }
        if (keys != Py_None) {
            if (!PyUnicode_Check(keys)) {
                PyErr_SetString(PyExc_TypeError, "DispatchInfo.keys is not a str");
                goto fail;
            }
            Py_ssize_t len = PyUnicode_GET_LENGTH(keys), from = 0;
            int kind = PyUnicode_KIND(keys);
            const void *data = PyUnicode_DATA(keys);
            for (Py_ssize_t j = 0; j <= len; j++) {
                if (j == len || PyUnicode_READ(kind, data, j) == ' ') {
                    if (j > from && add_key_item(items, topic, keys, from, j, offset_o, stored,
                                                 key_hash) < 0)
                        goto fail;
                    from = j + 1;
                }
            }
        }
        if (PyList_GET_SIZE(items) > count)
            end_phy_offset = offset;
    }
    return items;
fail:
    Py_DECREF(items);
    return NULL;
}

static PyObject *add_index_items(PyObject *self, PyObject *args) {
    PyObject *mm, *items;
    Py_ssize_t start;
    long long number, items_max, slots, base, begin_ms, slot_count;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!nLLLLLL:add_index_items", &mm, &PyList_Type, &items, &start,
                          &number, &items_max, &slots, &base, &begin_ms, &slot_count))
        return NULL;
    if (slots <= 0) {
        PyErr_SetString(PyExc_ValueError, "an index file needs at least one hash slot");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    unsigned char *m = view.buf;
    Py_ssize_t at = start, end = PyList_GET_SIZE(items);
    PyObject *begin_phy = Py_None;
    Py_INCREF(begin_phy);
    while (at < end && number < items_max) {
        PyObject *item = PyList_GET_ITEM(items, at);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_SetString(PyExc_TypeError, "index items are (key hash, offset, store time)");
            goto fail;
        }
        long long key_hash = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 0));
        long long phy = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
        long long stored = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2));
        if (PyErr_Occurred())
            goto fail;
        if (key_hash < 0 || key_hash > INT32_MAX_VALUE) {
            PyErr_SetString(PyExc_ValueError, "index key hash must be in [0, 2**31)");
            goto fail;
        }
        long long slot_pos = INDEX_HEADER_SIZE + (key_hash % slots) * INDEX_SLOT_SIZE;
        long long item_pos = base + number * INDEX_ITEM_SIZE;
        if (slot_pos + INDEX_SLOT_SIZE > view.len || item_pos < 0 ||
            item_pos + INDEX_ITEM_SIZE > view.len) {
            PyErr_SetString(PyExc_IndexError, "index item or slot outside the mapped file");
            goto fail;
        }
        long long slot_value = get_i32(m + slot_pos);
        if (slot_value <= 0 || slot_value > number) {
            slot_value = 0;
            slot_count += 1;
        }
        long long time_diff_s = 0;
        if (begin_ms > 0 && stored > begin_ms) {
            time_diff_s = (stored - begin_ms) / 1000;
            if (time_diff_s > INT32_MAX_VALUE)
                time_diff_s = INT32_MAX_VALUE;
        }
        put_i32(m + item_pos, key_hash);
        put_i64(m + item_pos + 4, phy);
        put_i32(m + item_pos + 12, time_diff_s);
        put_i32(m + item_pos + 16, slot_value);
        put_i32(m + slot_pos, number);
        if (number <= 1) {
            Py_INCREF(PyTuple_GET_ITEM(item, 1));
            Py_SETREF(begin_phy, PyTuple_GET_ITEM(item, 1));
            begin_ms = stored;
        }
        number += 1;
        at += 1;
    }
    PyBuffer_Release(&view);
    PyObject *out = Py_BuildValue("(nLLNL)", at, number, slot_count, begin_phy, begin_ms);
    return out;
fail:
    PyBuffer_Release(&view);
    Py_DECREF(begin_phy);
    return NULL;
}

/* ---------------------------------------------------------------- dispatch infos */
static PyObject *s_TAGS, *s_KEYS, *s_UNIQ_KEY;

/* Java String.hashCode of an ASCII str as a signed 32-bit int. */
static long java_hash_ascii(PyObject *text) {
    const unsigned char *p = PyUnicode_1BYTE_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    uint32_t h = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        h = 31u * h + p[i];
    return (long)(int32_t)h;
}

/* Borrowed properties.get(name) of a dict (NULL with an error set, Py_None when absent). */
static PyObject *prop_get(PyObject *p, PyObject *name) {
    PyObject *v = PyDict_GetItemWithError(p, name);
    if (v == NULL && !PyErr_Occurred())
        return Py_None;
    return v;
}

static PyObject *dispatch_infos(PyObject *self, PyObject *args) {
    PyObject *msgs, *results, *tags_code, *fallback;
    PyTypeObject *info_type;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!OO:dispatch_infos", &PyList_Type, &msgs, &PyList_Type,
                          &results, &PyType_Type, &info_type, &tags_code, &fallback))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    if (PyList_GET_SIZE(results) != n || !PyType_IsSubtype(info_type, &PyTuple_Type))
        return PyObject_CallFunctionObjArgs(fallback, msgs, results, NULL);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *msg = PyList_GET_ITEM(msgs, i), *res = PyList_GET_ITEM(results, i);
        PyObject *p = PyObject_GetAttr(msg, s_properties);
        if (p == NULL)
            goto fail;
        if (!PyDict_Check(p) || !PyTuple_Check(res) || PyTuple_GET_SIZE(res) < 4) {
            Py_DECREF(p);
            Py_DECREF(out);
            return PyObject_CallFunctionObjArgs(fallback, msgs, results, NULL);
        }
        PyObject *tag = prop_get(p, s_TAGS), *keys = prop_get(p, s_KEYS),
                 *uniq = prop_get(p, s_UNIQ_KEY);
        if (tag == NULL || keys == NULL || uniq == NULL) {
            Py_DECREF(p);
            goto fail;
        }
        PyObject *code;
        int truthy = PyObject_IsTrue(tag);
        if (truthy < 0) {
            Py_DECREF(p);
            goto fail;
        }
        if (!truthy)
            code = PyLong_FromLong(0);
        else if (PyUnicode_CheckExact(tag) && PyUnicode_IS_ASCII(tag))
            code = PyLong_FromLong(java_hash_ascii(tag));
        else
            code = PyObject_CallOneArg(tags_code, tag);
        PyObject *info = code ? info_type->tp_alloc(info_type, 12) : NULL;
        PyObject *topic = info ? PyObject_GetAttr(msg, s_topic) : NULL;
        PyObject *queue_id = topic ? PyObject_GetAttr(msg, s_queue_id) : NULL;
        PyObject *sys_flag = queue_id ? PyObject_GetAttr(msg, s_sys_flag) : NULL;
        PyObject *prepared = sys_flag ? PyObject_GetAttr(msg, s_prepared_transaction_offset)
                                      : NULL;
        if (prepared == NULL) {
            Py_XDECREF(code);
            Py_XDECREF(info);
            Py_XDECREF(topic);
            Py_XDECREF(queue_id);
            Py_XDECREF(sys_flag);
            Py_DECREF(p);
            goto fail;
        }
        PyObject *wrote = PyTuple_GET_ITEM(res, 0), *size = PyTuple_GET_ITEM(res, 1),
                 *qoff = PyTuple_GET_ITEM(res, 2), *ts = PyTuple_GET_ITEM(res, 3);
        Py_INCREF(wrote);
        Py_INCREF(size);
        Py_INCREF(ts);
        Py_INCREF(qoff);
        Py_INCREF(keys);
        Py_INCREF(uniq);
        PyTuple_SET_ITEM(info, 0, topic);
        PyTuple_SET_ITEM(info, 1, queue_id);
        PyTuple_SET_ITEM(info, 2, wrote);
        PyTuple_SET_ITEM(info, 3, size);
        PyTuple_SET_ITEM(info, 4, code);
        PyTuple_SET_ITEM(info, 5, ts);
        PyTuple_SET_ITEM(info, 6, qoff);
        PyTuple_SET_ITEM(info, 7, keys);
        PyTuple_SET_ITEM(info, 8, uniq);
        PyTuple_SET_ITEM(info, 9, sys_flag);
        PyTuple_SET_ITEM(info, 10, prepared);
        PyTuple_SET_ITEM(info, 11, p);
        PyList_SET_ITEM(out, i, info);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ---------------------------------------------------------------- consume-queue units */
/* queue_units(infos) -> [(topic, queue_id, first queue offset, first end, last end, units or
 * None, infos of the run)]: the records of a dispatched batch that take a consume-queue unit
 * (transaction bit 0x4 clear), grouped by queue in order of first appearance, with their 20-byte
 * units (commit offset long, size int, tags code long) packed back to back. units is None when
 * the run is not a plain sequence (queue offsets not consecutive, commit offsets not rising, a
 * value the unit cannot hold): the caller then puts the run's records one by one. */
typedef struct {
    PyObject *topic, *queue_id; /* borrowed from the first info of the run */
    long long qid, first_qo, prev_qo, prev_end, first_end;
    Py_ssize_t count;
    int plain;
} Run;

static PyObject *queue_units(PyObject *self, PyObject *args) {
    PyObject *infos;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!:queue_units", &PyList_Type, &infos))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(infos), nruns = 0;
    Run *runs = PyMem_Malloc(sizeof(Run) * (size_t)(n ? n : 1));
    Py_ssize_t *run_of = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n ? n : 1));
    PyObject *out = NULL, **lists = NULL, **units = NULL;
    if (runs == NULL || run_of == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *info = PyList_GET_ITEM(infos, i);
        run_of[i] = -1;
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) < 12) {
            PyErr_SetString(PyExc_TypeError, "queue_units takes DispatchInfo tuples");
            goto done;
        }
        long long sys_flag = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 9));
        if (sys_flag == -1 && PyErr_Occurred())
            goto done;
        if (sys_flag & SYSFLAG_TRANSACTION_PREPARED_TYPE)
            continue; /* prepared (0x4) or rollback (0xC): no unit */
        PyObject *topic = PyTuple_GET_ITEM(info, 0), *qid_o = PyTuple_GET_ITEM(info, 1);
        long long qid = PyLong_AsLongLong(qid_o);
        long long commit = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 2));
        long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 3));
        long long qo = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 6));
        if (PyErr_Occurred())
            goto done;
        Py_ssize_t r = nruns - 1;
        for (; r >= 0; r--) {
            if (runs[r].qid != qid)
                continue;
            if (runs[r].topic == topic)
                break;
            int eq = PyObject_RichCompareBool(runs[r].topic, topic, Py_EQ);
            if (eq < 0)
                goto done;
            if (eq)
                break;
        }
        if (r < 0) {
            r = nruns++;
            runs[r].topic = topic;
            runs[r].queue_id = qid_o;
            runs[r].qid = qid;
            runs[r].first_qo = qo;
            runs[r].first_end = commit + size;
            runs[r].count = 0;
            runs[r].plain = 1;
        } else if (qo != runs[r].prev_qo + 1 || commit < runs[r].prev_end) {
            runs[r].plain = 0;
        }
        if (commit < 0 || qo < 0 || size <= 0 || size > INT32_MAX_VALUE)
            runs[r].plain = 0;
        runs[r].prev_qo = qo;
        runs[r].prev_end = commit + size;
        runs[r].count++;
        run_of[i] = r;
    }
    lists = PyMem_Calloc((size_t)(nruns ? nruns : 1), sizeof(PyObject *));
    units = PyMem_Calloc((size_t)(nruns ? nruns : 1), sizeof(PyObject *));
    if (lists == NULL || units == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < nruns; r++) {
        lists[r] = PyList_New(0);
        if (lists[r] == NULL)
            goto done;
        if (runs[r].plain) {
            units[r] = PyBytes_FromStringAndSize(NULL, runs[r].count * 20);
            if (units[r] == NULL)
                goto done;
        }
        runs[r].count = 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t r = run_of[i];
        if (r < 0)
            continue;
        PyObject *info = PyList_GET_ITEM(infos, i);
        if (PyList_Append(lists[r], info) < 0)
            goto done;
        if (units[r] != NULL) {
            unsigned char *u = (unsigned char *)PyBytes_AS_STRING(units[r]) + runs[r].count * 20;
            long long commit = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 2));
            long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 3));
            long long code = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 4));
            if (PyErr_Occurred())
                goto done;
            put_i64(u, commit);
            put_i32(u + 8, size);
            put_i64(u + 12, code);
        }
        runs[r].count++;
    }
    out = PyList_New(nruns);
    if (out == NULL)
        goto done;
    for (Py_ssize_t r = 0; r < nruns; r++) {
        PyObject *entry = Py_BuildValue("(OOLLLOO)", runs[r].topic, runs[r].queue_id,
                                        runs[r].first_qo, runs[r].first_end, runs[r].prev_end,
                                        units[r] ? units[r] : Py_None, lists[r]);
        if (entry == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, r, entry);
    }
done:
    if (lists != NULL)
        for (Py_ssize_t r = 0; r < nruns; r++)
            Py_XDECREF(lists[r]);
    if (units != NULL)
        for (Py_ssize_t r = 0; r < nruns; r++)
            Py_XDECREF(units[r]);
    PyMem_Free(lists);
    PyMem_Free(units);
    PyMem_Free(runs);
    PyMem_Free(run_of);
    return out;
}

/* ---------------------------------------------------------------- dispatch hand-off */
/* take_handoff(handoff, batch, offset, end, count, records_max) -> (offset, count, stop): the
 * hand-off steps of DispatchService._dispatch_batch's loop. While the loop would run, it drops
 * hand-off entries below offset and moves the entry at offset to batch; it returns when the
 * loop ends (stop: the entry at offset is not committed yet) or when the next record must be
 * read from the commit log (no entry at offset; the caller's loop body takes over). */
static PyObject *s_popleft;

static PyObject *take_handoff(PyObject *self, PyObject *args) {
    PyObject *handoff, *batch;
    long long offset, end, count, records_max;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!LLLL:take_handoff", &handoff, &PyList_Type, &batch, &offset,
                          &end, &count, &records_max))
        return NULL;
    PyObject *popleft = PyObject_GetAttr(handoff, s_popleft);
    if (popleft == NULL)
        return NULL;
    int stop = 0;
    while (offset < end && count < records_max) {
        Py_ssize_t len = PyObject_Length(handoff);
        if (len < 0)
            goto fail;
        if (len == 0)
            break;
        PyObject *head = PySequence_GetItem(handoff, 0);
        if (head == NULL)
            goto fail;
        if (!PyTuple_Check(head) || PyTuple_GET_SIZE(head) < 4) {
            Py_DECREF(head);
            PyErr_SetString(PyExc_TypeError, "the hand-off holds DispatchInfo tuples");
            goto fail;
        }
        long long at = PyLong_AsLongLong(PyTuple_GET_ITEM(head, 2));
        long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(head, 3));
        if (PyErr_Occurred()) {
            Py_DECREF(head);
            goto fail;
        }
        if (at > offset) {
            Py_DECREF(head);
            break; /* read from the commit log */
        }
        if (at == offset && offset + size > end) {
            Py_DECREF(head);
            stop = 1; /* appended, not committed yet */
            break;
        }
        PyObject *popped = PyObject_CallNoArgs(popleft);
        if (popped == NULL) {
            Py_DECREF(head);
            goto fail;
        }
        Py_DECREF(popped);
        if (at < offset) {
            Py_DECREF(head);
            continue; /* dispatched already */
        }
        int rc = PyList_Append(batch, head);
        Py_DECREF(head);
        if (rc < 0)
            goto fail;
        offset = at + size;
        count += 1;
    }
    Py_DECREF(popleft);
    return Py_BuildValue("(LLO)", offset, count, stop ? Py_True : Py_False);
fail:
    Py_DECREF(popleft);
    return NULL;
}

/* ---------------------------------------------------------------- segment parsing (pipeline) */

/* record_starts(buf, start, size, chunk_bytes, record_min) -> (positions, stop, full):
 * columns._boundaries_python. Walks TOTALSIZE from `start` while a record's MAGICCODE is V1 or
 * V2 and record_min <= TOTALSIZE <= size - pos, up to `chunk_bytes` past `start` (at least one
 * record). positions: the starts found, as native int64 in one bytes object; stop: where the
 * walk stopped; full: whether it stopped only because the chunk was full. */
static PyObject *record_starts(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start, size, chunk_bytes, record_min;
    if (!PyArg_ParseTuple(args, "y*nnnn", &view, &start, &size, &chunk_bytes, &record_min))
        return NULL;
    if (size < 0 || size > view.len || start < 0 || chunk_bytes < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "record_starts: start or size outside the buffer");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t stop = (chunk_bytes > size - start) ? size : start + chunk_bytes;
    Py_ssize_t cap = 1024, n = 0, pos = start;
    int64_t *found = (int64_t *)PyMem_Malloc((size_t)cap * sizeof(int64_t));
    int full = 0;
    if (found == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    while (pos < size && (pos < stop || n == 0)) {
        if (size - pos < 8)
            break;
        const unsigned char *r = p + pos;
        int32_t total = (int32_t)(((uint32_t)r[0] << 24) | ((uint32_t)r[1] << 16) |
                                  ((uint32_t)r[2] << 8) | (uint32_t)r[3]);
        int32_t magic = (int32_t)(((uint32_t)r[4] << 24) | ((uint32_t)r[5] << 16) |
                                  ((uint32_t)r[6] << 8) | (uint32_t)r[7]);
        if ((magic != MAGIC_V1 && magic != MAGIC_V2) || total < record_min || total > size - pos)
            break;
        if (n == cap) {
            cap *= 2;
            int64_t *grown = (int64_t *)PyMem_Realloc(found, (size_t)cap * sizeof(int64_t));
            if (grown == NULL) {
                PyMem_Free(found);
                PyBuffer_Release(&view);
                return PyErr_NoMemory();
            }
            found = grown;
        }
        found[n++] = pos;
        pos += total;
    }
    if (!(pos < size && (pos < stop || n == 0)))
        full = pos < size; /* the loop's condition ended it, not a break */
    else
        full = 0;
    PyBuffer_Release(&view);
    PyObject *raw = PyBytes_FromStringAndSize((const char *)found, n * (Py_ssize_t)sizeof(int64_t));
    PyMem_Free(found);
    if (raw == NULL)
        return NULL;
    return Py_BuildValue("(NnO)", raw, pos, full ? Py_True : Py_False);
}

/* bodies_crc_bad(buf, starts, lengths, expected, count) -> index: the first i < count whose
 * crc32(buf[starts[i] : starts[i] + lengths[i]]) & 0x7FFFFFFF differs from expected[i], else
 * count (columns._check's body-CRC loop; the three arrays are native int64 buffers). */
static PyObject *bodies_crc_bad(PyObject *self, PyObject *args) {
    Py_buffer view, sv, lv, ev;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*y*y*y*n", &view, &sv, &lv, &ev, &count))
        return NULL;
    Py_ssize_t have = sv.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t bad = -1;
    if (lv.len / (Py_ssize_t)sizeof(int64_t) < have)
        have = lv.len / (Py_ssize_t)sizeof(int64_t);
    if (ev.len / (Py_ssize_t)sizeof(int64_t) < have)
        have = ev.len / (Py_ssize_t)sizeof(int64_t);
    if (count < 0 || count > have) {
        PyErr_SetString(PyExc_ValueError, "bodies_crc_bad: count exceeds the arrays");
        goto done;
    }
    const unsigned char *p = (const unsigned char *)view.buf;
    const int64_t *starts = (const int64_t *)sv.buf, *lengths = (const int64_t *)lv.buf,
                  *expected = (const int64_t *)ev.buf;
    int out_of_range = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t at = starts[i], len = lengths[i];
        if (at < 0 || len < 0 || at > (int64_t)view.len || len > (int64_t)view.len - at) {
            out_of_range = 1;
            bad = i;
            break;
        }
        uLong crc = crc32(0L, Z_NULL, 0);
        const unsigned char *b = p + at;
        while (len > 0) {
            uInt piece = len > (1 << 30) ? (uInt)(1 << 30) : (uInt)len;
            crc = crc32(crc, b, piece);
            b += piece;
            len -= piece;
        }
        if ((int64_t)(crc & 0x7FFFFFFFUL) != expected[i]) {
            bad = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    if (out_of_range) {
        PyErr_Format(PyExc_ValueError, "bodies_crc_bad: body %zd lies outside the buffer", bad);
        bad = -1;
    } else if (bad < 0) {
        bad = count;
    }
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&lv);
    PyBuffer_Release(&ev);
    if (PyErr_Occurred())
        return NULL;
    return PyLong_FromSsize_t(bad);
}

/* ---------------------------------------------------------------- module */
static PyMethodDef methods[] = {
    {"encode_all", encode_all, METH_VARARGS,
     "encode_all(msgs, body_max, append_crc, limit, file_size, encode_host, topic_field, "
     "fallback, too_large) -> list of (record fields, queue key): CommitLog.encode_all."},
    {"lay_out", lay_out, METH_VARARGS,
     "lay_out(batch, offsets, offset, room, file_size, ts, append_crc, host, port, "
     "result_type) -> (plan, results, reserved): CommitLog._lay_out."},
    {"index_items", index_items, METH_VARARGS,
     "index_items(infos, end_phy_offset, key_hash) -> [(key hash, offset, store time)]: "
     "the key loop of IndexService.build_index_batch."},
    {"add_index_items", add_index_items, METH_VARARGS,
     "add_index_items(mm, items, start, number, items_max, slots, base, begin_ms, slot_count) "
     "-> (at, number, slot_count, begin_phy_offset or None, begin_ms): IndexFile.add_items."},
    {"dispatch_infos", dispatch_infos, METH_VARARGS,
     "dispatch_infos(msgs, results, info_type, tags_code, fallback) -> [DispatchInfo]: "
     "message_store.dispatch_infos_of."},
    {"queue_units", queue_units, METH_VARARGS,
     "queue_units(infos) -> [(topic, queue_id, first queue offset, first end, last end, units "
     "or None, infos)]: the per-queue runs of MessageStore._dispatch_consume_queues."},
    {"take_handoff", take_handoff, METH_VARARGS,
     "take_handoff(handoff, batch, offset, end, count, records_max) -> (offset, count, stop): "
     "the hand-off steps of DispatchService._dispatch_batch."},
    {"record_starts", record_starts, METH_VARARGS,
     "record_starts(buf, start, size, chunk_bytes, record_min) -> (int64 positions as bytes, "
     "stop, full): the record-boundary walk of gannet.pipeline.columns."},
    {"bodies_crc_bad", bodies_crc_bad, METH_VARARGS,
     "bodies_crc_bad(buf, starts, lengths, expected, count) -> index of the first body whose "
     "CRC differs, else count: the body-CRC loop of gannet.pipeline.columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gannet.node.store.log._native",
    "Native batch encoder of the store's put path (mirrors packing.py, CommitLog._lay_out and "
    "the index batch path); see the header of _native.c.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
#define INTERN(var, text)                          \
    if ((var = PyUnicode_InternFromString(text)) == NULL) \
        return NULL;
    INTERN(s_topic, "topic")
    INTERN(s_body, "body")
    INTERN(s_queue_id, "queue_id")
    INTERN(s_flag, "flag")
    INTERN(s_properties, "properties")
    INTERN(s_sys_flag, "sys_flag")
    INTERN(s_born_timestamp_ms, "born_timestamp_ms")
    INTERN(s_born_host, "born_host")
    INTERN(s_store_host, "store_host")
    INTERN(s_reconsume_times, "reconsume_times")
    INTERN(s_prepared_transaction_offset, "prepared_transaction_offset")
    INTERN(s_popleft, "popleft")
    INTERN(s_TAGS, "TAGS")
    INTERN(s_KEYS, "KEYS")
    INTERN(s_UNIQ_KEY, "UNIQ_KEY")
#undef INTERN
    if ((magic_v1 = PyLong_FromLong(MAGIC_V1)) == NULL ||
        (magic_v2 = PyLong_FromLong(MAGIC_V2)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    /* VERSION: bumped with every change of a function's signature or behaviour; native.py
     * refuses a build of another version (a stale .so) and runs the Python path instead */
    if (m != NULL && PyModule_AddIntConstant(m, "VERSION", NATIVE_VERSION) < 0)
        Py_CLEAR(m);
    return m;
}
