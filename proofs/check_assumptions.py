"""Check the output of `coqc Assumptions.v` (a list of `Print Assumptions`
blocks): every axiom a main theorem depends on must be one of the standard
library's real-number axioms listed in allowed_axioms.txt.  Exit non-zero
otherwise."""
import re
import sys


def main(log_path: str, allowed_path: str, source: str = "Assumptions.v") -> int:
    allowed = {
        line.strip()
        for line in open(allowed_path)
        if line.strip() and not line.startswith("#")
    }
    text = open(log_path).read()
    if "Error" in text:
        print(text)
        return 1
    blocks = text.count("Axioms:") + text.count("Closed under the global context")
    found = set()
    for line in text.splitlines():
        # an assumption starts at column 0 ("Name : type" or "Name" with
        # the type on the following, indented, lines)
        if not line or line[0].isspace():
            continue
        if line.startswith("Axioms:") or line.startswith("Closed under"):
            continue
        m = re.match(r"^([A-Za-z_][\w.']*)", line)
        found.add(m.group(1) if m else line)
    bad = sorted(found - allowed)
    expected = open(source).read().count("Print Assumptions")
    print(f"check-assumptions: {expected} theorems, {blocks} assumption blocks; axioms used: {sorted(found)}")
    if bad:
        print("DISALLOWED AXIOMS/ASSUMPTIONS:", bad)
        return 1
    if blocks < expected or expected == 0:
        print("missing Print Assumptions output")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
