/* fork_sibling(): fork the calling process so that the child's parent is the caller's
 * parent, not the caller (clone(2) with CLONE_PARENT).
 *
 * The fork server (_template.py) is a pre-imported interpreter that an owner (the
 * controller, or a host agent) starts once; each worker it forks this way is the
 * owner's own child, exactly as a worker the owner starts with subprocess is: the owner
 * reaps it and reads its exit status, watches it with a pidfd, and the worker's
 * PR_SET_PDEATHSIG follows the owner. Python's own fork hooks run around it as
 * os.fork() runs them (PyOS_BeforeFork / PyOS_AfterFork_*: the interpreter's locks and
 * threading state, os.register_at_fork callbacks). The caller must be single-threaded.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

PyDoc_STRVAR(fork_sibling_doc,
             "fork_sibling() -> int\n\n"
             "Fork as os.fork() does, but make the child a child of this process' parent "
             "(CLONE_PARENT). 0 in the child, the child's pid in the caller.");

static PyObject *fork_sibling(PyObject *module, PyObject *unused) {
    PyOS_BeforeFork();
    /* No stack, no thread-id pointers: a fork's copy of this process, whatever the
     * architecture's order of clone's other arguments. */
    long pid = syscall(SYS_clone, (unsigned long)(CLONE_PARENT | SIGCHLD), 0L, 0L, 0L, 0L);
    int error = errno;
    if (pid == 0) {
        PyOS_AfterFork_Child();
        return PyLong_FromLong(0);
    }
    PyOS_AfterFork_Parent();
    if (pid < 0) {
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(pid);
}

static PyMethodDef methods[] = {
    {"fork_sibling", fork_sibling, METH_NOARGS, fork_sibling_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "actormesh._hosts._cfork",
    "Forking a worker as a sibling of the fork server (see _template.py).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__cfork(void) { return PyModuleDef_Init(&module_def); }
