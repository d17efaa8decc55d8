"""The work behind each `fsr` subcommand (fsr.cli only parses).

Exit codes: 0 success; 1 the candidate's verdict is not OK; 2 bad input; 3 no CUDA device.
"""

EXIT_OK, EXIT_VERDICT, EXIT_USAGE, EXIT_NO_DEVICE = 0, 1, 2, 3


class UsageError(Exception):
    """Bad user input: reported in one line, exit code 2."""
