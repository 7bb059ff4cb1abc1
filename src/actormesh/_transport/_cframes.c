/* The compiled twin of the per-message path in _frames.py and _speedups.py.
 *
 * Every call and every reply crosses these four functions once on each side: sizing a
 * frame's parts and encoding its header, splitting received bytes into frames, and the
 * two system calls. In Python each is a handful of small calls (struct, len, slicing,
 * the socket module's argument handling); here each is one call. The pure-Python
 * versions (_frames.py, _speedups.py) define the behaviour; tests/unit/test_speedups.py
 * runs both on the same inputs, and ACTORMESH_NO_EXTENSIONS=1 selects the Python ones.
 *
 * Frame layout (see _frames.py): <u32 nparts><u64 body_bytes> then nparts u64 lengths,
 * little-endian, then the parts. A length with bit 63 set is a shared-memory part (its
 * bytes are not in the body); a count with bit 31 set is a control frame. Neither is
 * parsed here: parse_inline stops in front of such a frame and Python handles it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define PREFIX_SIZE 12
#define SHARED_BIT (UINT64_C(1) << 63)
#define RETURNED_BIT (UINT32_C(1) << 31)
#define MAX_PARTS (1 << 20)
/* At most this many buffers per sendmsg (the caller queues longer lists, see
 * _connection.py's _IOV_MAX). */
#define MAX_IOV 512
/* Descriptors one recvmsg may carry (as _connection.py's _MAX_FDS). */
#define MAX_FDS 64

static inline uint32_t read_u32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return le32toh(v);
}

static inline uint64_t read_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return le64toh(v);
}

static inline void write_u32(unsigned char *p, uint32_t v) {
    v = htole32(v);
    memcpy(p, &v, 4);
}

static inline void write_u64(unsigned char *p, uint64_t v) {
    v = htole64(v);
    memcpy(p, &v, 8);
}

/* A descriptor number (PyLong_AsInt is 3.13+). -1 with an exception set on failure; a
 * closed socket's fileno() is -1, which fails as the socket module would (EBADF). */
static int as_fd(PyObject *number) {
    long value = PyLong_AsLong(number);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (value < 0) {
        errno = EBADF;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    if (value > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "bad file descriptor %ld", value);
        return -1;
    }
    return (int)value;
}

/* Bytes in one part: len() for bytes and bytearray, the buffer's size otherwise
 * (a memoryview's len counts items, not bytes). -1 with an exception set on failure. */
static Py_ssize_t part_size(PyObject *part) {
    if (PyBytes_CheckExact(part)) {
        return PyBytes_GET_SIZE(part);
    }
    if (PyByteArray_CheckExact(part)) {
        return PyByteArray_GET_SIZE(part);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(part, &view, PyBUF_FULL_RO) < 0) {
        return -1;
    }
    Py_ssize_t size = view.len;
    PyBuffer_Release(&view);
    return size;
}

PyDoc_STRVAR(frame_header_doc,
             "frame_header(parts) -> (header, size, largest)\n\n"
             "The header of a frame of inline parts, the frame's total size, and the size "
             "of its largest part.");

static PyObject *frame_header(PyObject *module, PyObject *parts) {
    PyObject *seq = PySequence_Fast(parts, "frame parts must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count > MAX_PARTS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "a frame of %zd parts, over the limit", count);
        return NULL;
    }
    PyObject *header = PyBytes_FromStringAndSize(NULL, PREFIX_SIZE + 8 * count);
    if (header == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(header);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    uint64_t body = 0;
    Py_ssize_t largest = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t size = part_size(items[i]);
        if (size < 0) {
            Py_DECREF(seq);
            Py_DECREF(header);
            return NULL;
        }
        write_u64(out + PREFIX_SIZE + 8 * i, (uint64_t)size);
        body += (uint64_t)size;
        if (size > largest) {
            largest = size;
        }
    }
    Py_DECREF(seq);
    write_u32(out, (uint32_t)count);
    write_u64(out + 4, body);
    uint64_t total = body + PREFIX_SIZE + 8 * (uint64_t)count;
    return Py_BuildValue("(NKn)", header, (unsigned long long)total, largest);
}

/* One frame's parts: a copy of its body in a fresh bytearray (the read buffer is reused),
 * cut into writable memoryviews, one per part. */
static PyObject *frame_parts(const unsigned char *lengths, Py_ssize_t count,
                             const unsigned char *body, Py_ssize_t body_size) {
    PyObject *copy = PyByteArray_FromStringAndSize((const char *)body, body_size);
    if (copy == NULL) {
        return NULL;
    }
    PyObject *whole = PyMemoryView_FromObject(copy);
    Py_DECREF(copy);
    if (whole == NULL) {
        return NULL;
    }
    PyObject *parts = PyList_New(count);
    if (parts == NULL) {
        Py_DECREF(whole);
        return NULL;
    }
    Py_ssize_t offset = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t size = (Py_ssize_t)read_u64(lengths + 8 * i);
        PyObject *part;
        if (count == 1) {
            Py_INCREF(whole);
            part = whole;
        } else {
            PyObject *start = PyLong_FromSsize_t(offset);
            PyObject *stop = PyLong_FromSsize_t(offset + size);
            PyObject *cut = (start && stop) ? PySlice_New(start, stop, NULL) : NULL;
            Py_XDECREF(start);
            Py_XDECREF(stop);
            part = cut ? PyObject_GetItem(whole, cut) : NULL;
            Py_XDECREF(cut);
        }
        if (part == NULL) {
            Py_DECREF(parts);
            Py_DECREF(whole);
            return NULL;
        }
        PyList_SET_ITEM(parts, i, part);
        offset += size;
    }
    Py_DECREF(whole);
    return parts;
}

PyDoc_STRVAR(parse_inline_doc,
             "parse_inline(buffer, start, end, max_frame_bytes) -> (frames, start)\n\n"
             "Split the complete frames in buffer[start:end] into their parts, stopping in "
             "front of an incomplete frame, a control frame or one with shared-memory "
             "parts. Raises OSError for a frame over the limit or whose lengths do not add "
             "up.");

static PyObject *parse_inline(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "parse_inline takes 4 arguments");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    long long max_frame = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (start < 0 || end < start || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "bad range [%zd, %zd) of a buffer of %zd bytes",
                     start, end, view.len);
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    PyObject *frames = PyList_New(0);
    if (frames == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    while (end - start >= PREFIX_SIZE) {
        uint32_t count = read_u32(buf + start);
        uint64_t body = read_u64(buf + start + 4);
        if (count & RETURNED_BIT) {
            break; /* a control frame: Python returns the segments */
        }
        if (body > (uint64_t)max_frame || count > MAX_PARTS) {
            PyErr_Format(PyExc_OSError, "peer sent a frame of %llu bytes, over the limit",
                         (unsigned long long)body);
            goto fail;
        }
        Py_ssize_t head = PREFIX_SIZE + 8 * (Py_ssize_t)count;
        if (end - start < head) {
            break;
        }
        const unsigned char *lengths = buf + start + PREFIX_SIZE;
        uint64_t sum = 0, inline_sum = 0;
        int shared = 0;
        for (uint32_t i = 0; i < count; i++) {
            uint64_t length = read_u64(lengths + 8 * i);
            sum += length;
            if (length & SHARED_BIT) {
                shared = 1;
            } else {
                inline_sum += length;
            }
        }
        if (sum != body && inline_sum != body) {
            PyErr_Format(PyExc_OSError,
                         "peer sent a frame whose part lengths do not add up to %llu",
                         (unsigned long long)body);
            goto fail;
        }
        if (shared || (uint64_t)(end - start - head) < body) {
            break; /* shared parts, or not all here yet: Python's slower path */
        }
        PyObject *parts = frame_parts(lengths, (Py_ssize_t)count, buf + start + head,
                                      (Py_ssize_t)body);
        if (parts == NULL) {
            goto fail;
        }
        int appended = PyList_Append(frames, parts);
        Py_DECREF(parts);
        if (appended < 0) {
            goto fail;
        }
        start += head + (Py_ssize_t)body;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", frames, start);
fail:
    PyBuffer_Release(&view);
    Py_DECREF(frames);
    return NULL;
}

PyDoc_STRVAR(receive_doc,
             "receive(sock, fd, into) -> (nbytes, fds, truncated)\n\n"
             "One recvmsg on descriptor fd into the writable buffer into, with room for "
             "descriptors; sock is unused here (the Python twin reads through it).");

static PyObject *receive(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "receive takes 3 arguments");
        return NULL;
    }
    int fd = as_fd(args[1]);
    if (fd < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_WRITABLE) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError)) { /* as the socket module says it */
            PyErr_SetString(PyExc_TypeError, "receive needs a writable buffer");
        }
        return NULL;
    }
    union {
        char data[CMSG_SPACE(MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {view.buf, (size_t)view.len};
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data;
    msg.msg_controllen = sizeof(control.data);
    ssize_t n;
    int error = 0;
    Py_BEGIN_ALLOW_THREADS
    do {
        n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        error = errno;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (n < 0) {
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *fds = PyList_New(0);
    if (fds == NULL) {
        return NULL;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        size_t bytes = c->cmsg_len - CMSG_LEN(0);
        int *received = (int *)CMSG_DATA(c);
        for (size_t i = 0; i < bytes / sizeof(int); i++) {
            PyObject *number = PyLong_FromLong(received[i]);
            if (number == NULL || PyList_Append(fds, number) < 0) {
                Py_XDECREF(number);
                Py_DECREF(fds);
                return NULL;
            }
            Py_DECREF(number);
        }
    }
    return Py_BuildValue("(nNO)", (Py_ssize_t)n, fds,
                         (msg.msg_flags & MSG_CTRUNC) ? Py_True : Py_False);
}

PyDoc_STRVAR(send_buffers_doc,
             "send_buffers(sock, fd, buffers) -> int\n\n"
             "One sendmsg of the buffers (at most 512) on descriptor fd; the bytes sent. "
             "Raises BlockingIOError when nothing could be sent.");

static PyObject *send_buffers(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "send_buffers takes 3 arguments");
        return NULL;
    }
    int fd = as_fd(args[1]);
    if (fd < 0) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[2], "buffers must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count > MAX_IOV) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%zd buffers in one send, over %d", count, MAX_IOV);
        return NULL;
    }
    Py_buffer views[MAX_IOV];
    struct iovec iov[MAX_IOV];
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t taken = 0;
    PyObject *result = NULL;
    for (; taken < count; taken++) {
        if (PyObject_GetBuffer(items[taken], &views[taken], PyBUF_SIMPLE) < 0) {
            goto done;
        }
        iov[taken].iov_base = views[taken].buf;
        iov[taken].iov_len = (size_t)views[taken].len;
    }
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)count;
    ssize_t n;
    int error = 0;
    Py_BEGIN_ALLOW_THREADS
    do {
        n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        error = errno;
    }
    Py_END_ALLOW_THREADS
    if (n < 0) {
        errno = error;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    result = PyLong_FromSsize_t((Py_ssize_t)n);
done:
    for (Py_ssize_t i = 0; i < taken; i++) {
        PyBuffer_Release(&views[i]);
    }
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"frame_header", (PyCFunction)frame_header, METH_O, frame_header_doc},
    {"parse_inline", (PyCFunction)(void (*)(void))parse_inline, METH_FASTCALL, parse_inline_doc},
    {"receive", (PyCFunction)(void (*)(void))receive, METH_FASTCALL, receive_doc},
    {"send_buffers", (PyCFunction)(void (*)(void))send_buffers, METH_FASTCALL,
     send_buffers_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "actormesh._transport._cframes",
    "The compiled twin of the per-message frame path (see _speedups.py).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__cframes(void) { return PyModuleDef_Init(&module_def); }
