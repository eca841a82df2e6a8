"""example_args.py - what the example programs share on their command lines."""
import argparse


def at_least(lo, kind=int):
    """An argparse type: a number of `kind` no smaller than lo ("must be >= 1, got 0")."""
    def parse(text):
        v = kind(text)
        if not v >= lo:
            raise argparse.ArgumentTypeError("must be >= %s, got %s" % (lo, text))
        return v
    return parse
