"""What several test modules share (paths, command-line runners, lineage rows, precision
emulation): test modules import from here, never from each other."""
