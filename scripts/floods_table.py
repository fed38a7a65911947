#!/usr/bin/env python3
"""The flood table of docs/reliability.md, made from the JSON scripts/floods.sh
writes (docs/reliability-floods.json). Prints the table; with --write, puts it
between the table's markers in docs/reliability.md. tests/docs_tables.rs checks
that the doc and the JSON agree."""
import json
import sys

BEGIN = "<!-- floods table: made by scripts/floods_table.py from docs/reliability-floods.json -->"
END = "<!-- end floods table -->"


def table(data):
    rows = [
        "| flood | border-dp rx/s | real clients ok | connect p50 / p99 ms | most entries / tuples | cookies sent | SYNs at the backend (cookies it sent) | refusal counters |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in data["floods"]:
        moved = ", ".join(f"`{n}` {v}" for n, v in f["counters_moved"]) or "-"
        rows.append(
            f"| {f['flood']} | {f['rx_per_s']} | {f['real_ok']} / {f['real_total']} "
            f"| {f['connect_p50_ms']} / {f['connect_p99_ms']} "
            f"| {f['max_conntrack_entries']} / {f['max_local_tuples_in_use']} "
            f"| {f['cookies_sent']} | {f['backend_syns']} ({f['backend_syncookies_sent']}) | {moved} |"
        )
    head = (
        f"`{data['command']}` at commit {data['commit']}: hping3 pace `{data['pace']}`, "
        f"{data['seconds']} s per flood, a {data['table']}-entry table."
    )
    return head + "\n\n" + "\n".join(rows)


def main():
    data = json.load(open("docs/reliability-floods.json"))
    t = table(data)
    if "--write" not in sys.argv:
        print(t)
        return
    doc = open("docs/reliability.md").read()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    open("docs/reliability.md", "w").write(doc[:start] + "\n" + t + "\n" + doc[end:])


if __name__ == "__main__":
    main()
