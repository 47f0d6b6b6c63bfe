"""Reading a CSV page that Nsight Compute writes, for the profile readers beside this file."""
import csv
import sys


def read_page(path, is_header, kind):
    """The page's header row and the rows after it, or None after saying on stderr why: the file
    cannot be read, or no row passes is_header (`kind` names the header and the page expected)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        print(f"{path}: {e.strerror}", file=sys.stderr)
        return None
    at = next((i for i, r in enumerate(rows) if is_header(r)), None)
    if at is None:
        print(f"{path}: no {kind}", file=sys.stderr)
        return None
    return rows[at], rows[at + 1:]
