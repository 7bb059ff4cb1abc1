// The compiled twin of actormesh.rpc._future_errors: fails a torch.futures.Future with a
// Python exception kept as it is. torch.futures.Future.set_exception (Python) completes
// the future with the exception as its value, so torch.futures.wait_all and collect_all,
// which stop at the first future in the C++ error state, wait for the others; this puts
// the future in that state, and each time torch rethrows the error into Python (wait(),
// value(), wait_all) the same exception object is raised again, type and all.
//
// Built by scripts/bootstrap against the installed torch (python -m
// actormesh.rpc._future_errors build); without it the pure-Python path is used.

#include <torch/csrc/jit/python/pybind_utils.h>
#include <pybind11/pybind11.h>

#include <exception>
#include <string>

namespace py = pybind11;

namespace {

// A Python exception object held by a C++ exception, for as many rethrows as torch makes
// (each copy of the exception_ptr keeps a reference; the GIL is taken to change it).
class PythonError : public std::exception {
 public:
  explicit PythonError(PyObject* exc) : exc_(exc), text_(describe(exc)) { Py_INCREF(exc_); }

  PythonError(const PythonError& other) : exc_(other.exc_), text_(other.text_) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_INCREF(exc_);
    PyGILState_Release(gil);
  }

  PythonError& operator=(const PythonError&) = delete;

  ~PythonError() override {
    if (Py_IsInitialized()) {
      PyGILState_STATE gil = PyGILState_Ensure();
      Py_DECREF(exc_);
      PyGILState_Release(gil);
    }
  }

  const char* what() const noexcept override { return text_.c_str(); }

  void raise() const { PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc_)), exc_); }

 private:
  // What torch's logs and C++ callers see (the GIL is held: called from set_exception).
  static std::string describe(PyObject* exc) {
    PyObject* text = PyObject_Str(exc);
    const char* utf8 = text != nullptr ? PyUnicode_AsUTF8(text) : nullptr;
    std::string out = std::string(Py_TYPE(exc)->tp_name) + ": " + (utf8 ? utf8 : "");
    Py_XDECREF(text);
    PyErr_Clear();
    return out;
  }

  PyObject* exc_;
  std::string text_;
};

void set_exception(const std::shared_ptr<torch::jit::PythonFutureWrapper>& future,
                   const py::object& exc) {
  if (!PyExceptionInstance_Check(exc.ptr())) {
    throw py::type_error("set_exception needs an exception instance");
  }
  auto error = std::make_exception_ptr(PythonError(exc.ptr()));
  py::gil_scoped_release release;
  future->fut->setError(error);
}

}  // namespace

PYBIND11_MODULE(_cfutures, module) {
  module.doc() = "Fail a torch future with a Python exception kept as it is.";
  py::register_exception_translator([](std::exception_ptr raised) {
    try {
      if (raised) {
        std::rethrow_exception(raised);
      }
    } catch (const PythonError& error) {
      error.raise();
    }
  });
  module.def("set_exception", &set_exception, py::arg("future"), py::arg("exception"));
}
