/* The compiled twin of _dispatch.py: a received frame's header decoded, checked, and
 * handed to the handler of its kind.
 *
 * Every frame a process receives passes here once. In Python the step is four calls
 * (the header's unpickling, its check against the kind's layout, an if-chain over the
 * kinds, the handler); here it is one call that ends in the handler. _dispatch.py
 * defines the behaviour (the error texts included); tests/unit/test_dispatch.py runs
 * both on the same frames, and ACTORMESH_NO_EXTENSIONS=1 selects the Python one.
 *
 * The table is a tuple indexed by message kind: None for a kind this process does not
 * know, else (handler, layouts) where bit n of the int layouts is set when a header of
 * that kind may have n items.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject *loads; /* pickle.loads, the C one */
} dispatch_state;

static inline dispatch_state *state_of(PyObject *module) {
    return (dispatch_state *)PyModule_GetState(module);
}

/* The header tuple's entry in the table, or NULL with a ValueError set (the texts are
 * _dispatch.py's); *bad_table is set when the table itself is wrong (our bug, not the
 * peer's: it propagates). */
static PyObject *entry_for(PyObject *table, PyObject *header, int *bad_table) {
    if (!PyTuple_Check(header) || PyTuple_GET_SIZE(header) == 0) {
        PyErr_Format(PyExc_ValueError, "malformed envelope header: %R", header);
        return NULL;
    }
    PyObject *kind = PyTuple_GET_ITEM(header, 0);
    PyObject *entry = Py_None;
    if (PyLong_Check(kind)) {
        int overflow = 0;
        long index = PyLong_AsLongAndOverflow(kind, &overflow);
        if (!overflow && index >= 0 && index < PyTuple_GET_SIZE(table)) {
            entry = PyTuple_GET_ITEM(table, index);
        }
    }
    if (entry == Py_None) {
        PyErr_Format(PyExc_ValueError, "unknown message kind %R", kind);
        return NULL;
    }
    unsigned long layouts = (unsigned long)-1;
    if (PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 2) {
        layouts = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(entry, 1));
    }
    if (layouts == (unsigned long)-1) {
        *bad_table = 1;
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "a table entry is (handler, layouts as an int)");
        return NULL;
    }
    Py_ssize_t items = PyTuple_GET_SIZE(header);
    if (items >= (Py_ssize_t)(8 * sizeof(layouts)) || !((layouts >> items) & 1)) {
        PyErr_Format(PyExc_ValueError, "a header of kind %S with %zd items: %R", kind, items,
                     header);
        return NULL;
    }
    return entry;
}

/* Tell `unreadable` why the frame could not be read (the exception set now); NULL when
 * that is not an Exception (KeyboardInterrupt, say: it propagates) or unreadable fails. */
static PyObject *refuse(PyObject *unreadable, PyObject *conn) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return NULL;
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    PyObject *args[2] = {conn, value};
    PyObject *result = PyObject_Vectorcall(unreadable, args, 2, NULL);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return result;
}

PyDoc_STRVAR(dispatch_doc,
             "dispatch(table, unreadable, conn, parts)\n\n"
             "Decode the header in parts[0] and return table[kind][0](conn, header, parts). "
             "A frame that cannot be read calls unreadable(conn, error) instead; what the "
             "handler raises propagates.");

static PyObject *dispatch(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "dispatch takes 4 arguments");
        return NULL;
    }
    PyObject *table = args[0], *unreadable = args[1], *conn = args[2], *parts = args[3];
    if (!PyTuple_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "the table must be a tuple");
        return NULL;
    }
    PyObject *first = PySequence_GetItem(parts, 0);
    if (first == NULL) {
        return refuse(unreadable, conn);
    }
    PyObject *header = PyObject_CallOneArg(state_of(module)->loads, first);
    Py_DECREF(first);
    if (header == NULL) {
        return refuse(unreadable, conn);
    }
    int bad_table = 0;
    PyObject *entry = entry_for(table, header, &bad_table);
    if (entry == NULL) {
        Py_DECREF(header);
        return bad_table ? NULL : refuse(unreadable, conn);
    }
    PyObject *call[3] = {conn, header, parts};
    PyObject *result = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 0), call, 3, NULL);
    Py_DECREF(header);
    return result;
}

static PyMethodDef methods[] = {
    {"dispatch", (PyCFunction)(void (*)(void))dispatch, METH_FASTCALL, dispatch_doc},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module) {
    PyObject *pickle = PyImport_ImportModule("_pickle");
    if (pickle == NULL) {
        return -1;
    }
    state_of(module)->loads = PyObject_GetAttrString(pickle, "loads");
    Py_DECREF(pickle);
    return state_of(module)->loads == NULL ? -1 : 0;
}

static int traverse(PyObject *module, visitproc visit, void *arg) {
    Py_VISIT(state_of(module)->loads);
    return 0;
}

static int clear(PyObject *module) {
    Py_CLEAR(state_of(module)->loads);
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "actormesh._core._cdispatch",
    "The compiled twin of a received frame's dispatch (see _dispatch.py).",
    sizeof(dispatch_state),
    methods,
    slots,
    traverse,
    clear,
    NULL,
};

PyMODINIT_FUNC PyInit__cdispatch(void) { return PyModuleDef_Init(&module_def); }
