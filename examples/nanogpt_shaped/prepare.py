"""Prepare a character-level data set as nanoGPT's data/shakespeare_char/prepare.py does: train.bin and val.bin
(the character ids as uint16, read back with numpy.memmap) and meta.pkl (the vocabulary), 90% / 10%. The standard
library's array writes the bytes numpy's tofile does (uint16 in the machine's order), so this runs on any python3.

    python prepare.py input.txt data/       # your text (nanoGPT's: tiny Shakespeare)
    python prepare.py --demo data/          # a generated text, no download (the tests use it)
"""
import argparse
import array
import pickle
import random
from pathlib import Path


def demo_text(chars: int = 200_000) -> str:
    """A deterministic text with structure to learn: short sentences from a small vocabulary of words."""
    rng = random.Random(0)
    words = "the a cat dog sat ran on under mat log and then slept barked quietly loudly".split()
    out, size = [], 0
    while size < chars:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(3, 8))).capitalize() + ".\n"
        out.append(line)
        size += len(line)
    return "".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("input", nargs="?", help="a text file (omit with --demo)")
    p.add_argument("out", help="the data directory to write")
    p.add_argument("--demo", action="store_true", help="generate the text instead of reading one")
    args = p.parse_args()
    if bool(args.demo) == bool(args.input):
        p.error("give a text file or --demo, not both")
    data = demo_text() if args.demo else Path(args.input).read_text()
    chars = sorted(set(data))
    stoi = {ch: i for i, ch in enumerate(chars)}
    n = int(0.9 * len(data))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("train.bin", data[:n]), ("val.bin", data[n:])):
        with open(out / name, "wb") as f:
            array.array("H", [stoi[c] for c in text]).tofile(f)
    with open(out / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, f)
    print(f"{len(data):,} characters, vocabulary {len(chars)}: {out}/train.bin ({n:,}), val.bin ({len(data) - n:,})")


if __name__ == "__main__":
    main()
