"""The built-in tasks, one folder each (task.toml, reference.py, baseline.cu, template.cu).

Installed with fsr as the package `fsr_tasks` (setup.py maps it to this folder), so an installed
fsr has its tasks; fsr finds them through `fsr.tasks.DEFAULT_TASKS_DIR`. Nothing here is imported
as Python: a task's reference.py is loaded by path.
"""
