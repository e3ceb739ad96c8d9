"""Reading `sparrow bench --csv` files: '#' header lines, then one CSV row per measurement."""
import csv
import lzma


def open_text(path):
    """A results file as text; FILE.xz (bench/results keeps its JSON files xz-compressed) unpacked."""
    return lzma.open(path, "rt") if path.endswith(".xz") else open(path)


def read(path):
    """(header, rows): the '# ...' lines and the rows as dicts."""
    with open_text(path) as f:
        lines = f.readlines()
    header = [l for l in lines if l.startswith("#")]
    return header, list(csv.DictReader(l for l in lines if not l.startswith("#")))


def ok_rows(path):
    """The rows that ran and passed their check (status ok)."""
    return [r for r in read(path)[1] if r["status"] == "ok"]
