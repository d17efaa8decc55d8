"""`fsr export`: a kernel a run found, as a small Python module that launches it from CuPy or
PyTorch and checks it against its task's reference, without fsr.

module.py writes the module's text; runtime.py, calls.py and checks.py are the code every such
module carries (copied in, with fsr/evaluate/device_globals.py): they import nothing of fsr but
each other, on lines the copy drops.
"""
