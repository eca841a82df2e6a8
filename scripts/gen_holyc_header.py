#!/usr/bin/env python3
"""Generates frontends/holyc/minitorch.HH, the HolyC binding of libminitorch.so, from abi/minitorch.h.

    python3 scripts/gen_holyc_header.py            # writes frontends/holyc/minitorch.HH
    python3 scripts/gen_holyc_header.py --check    # exit 1 when the committed file is stale
    python3 scripts/gen_holyc_header.py -o -       # print to stdout

Every `MT_API` function becomes one `extern "c"` line, every enum constant and every
MT_VERSION_* / MT_ABI_VERSION macro a `#define`, and every function also a
feature macro MT_HAVE_<NAME> (mt_cross_entropy -> MT_HAVE_CROSS_ENTROPY) for `#ifdef`. C types map to HolyC as:
int64_t -> I64, uint64_t -> U64, int32_t / int / enums -> I32, uint8_t -> U8, double -> F64,
void -> U0, char * -> U8 *, int64_t * -> I64 *, double * -> F64 *, enum * -> I32 *, any other
pointer (opaque handles, void *) -> U0 *, and a pointer to a pointer -> U0 **.
A type with no HolyC equivalent (float, structs by value) stops the generator.

The library is linked as `#link <minitorch>`: hcrun resolves it from MINITORCH_LIB when set,
else libminitorch.so next to the hcrun executable (the repository's build/), else the
system loader path, which is also where hcc looks.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = os.path.join(ROOT, "abi", "minitorch.h")
OUTPUT = os.path.join(ROOT, "frontends", "holyc", "minitorch.HH")

# Names HolyC (TempleOS or hcc) reserves; a C parameter so named gets a trailing underscore.
RESERVED = {
    "start", "end", "offset", "lastclass", "class", "union", "public", "extern", "static", "try",
    "catch", "default", "case", "switch", "sizeof", "goto", "reg", "noreg", "no_warn", "interrupt",
    "argc", "argv", "if", "else", "for", "while", "do", "return", "break", "continue", "asm",
}

SCALARS = {
    "int64_t": "I64", "uint64_t": "U64", "int32_t": "I32", "uint32_t": "U32", "int": "I32",
    "int16_t": "I16", "uint16_t": "U16", "int8_t": "I8", "uint8_t": "U8", "double": "F64",
    "void": "U0", "char": "U8", "size_t": "U64",
}
TYPED_POINTEES = {"int64_t": "I64", "double": "F64", "char": "U8", "uint8_t": "U8", "int32_t": "I32"}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def parse_enums(code):
    """[(enum type name, [(constant, value)])] in header order."""
    enums = []
    # `typedef enum name {` or, as the header spells it, `typedef MT_ENUM(name) {`
    for m in re.finditer(r"typedef\s+(?:enum\s+\w*|MT_ENUM\(\w+\))\s*\{(.*?)\}\s*(\w+)\s*;", code, flags=re.S):
        value = -1
        consts = []
        for item in m.group(1).split(","):
            item = item.strip()
            if not item:
                continue
            name, _, expr = item.partition("=")
            name = name.strip()
            if expr.strip():
                value = int(expr.strip(), 0)
            else:
                value += 1
            consts.append((name, value))
        enums.append((m.group(2), consts))
    return enums


def map_type(ctype, enum_names, where):
    """A C type (without the parameter name) -> HolyC type text."""
    t = ctype.replace("const", " ")
    stars = t.count("*")
    base = " ".join(t.replace("*", " ").split())
    if base.startswith("enum "):
        base = base[5:]
    if base.startswith("struct "):
        base = base[7:]
    if stars == 0:
        if base in SCALARS:
            return SCALARS[base]
        if base in enum_names:
            return "I32"
        sys.exit(f"gen_holyc_header: {where}: no HolyC type for '{ctype.strip()}'")
    if stars == 1:
        if base in TYPED_POINTEES:
            return TYPED_POINTEES[base] + " *"
        if base in enum_names:
            return "I32 *"
        return "U0 *"
    return "U0 " + "*" * stars


def split_param(param):
    """'const int64_t *shape' -> ('const int64_t *', 'shape'); '(void)' and '' -> None."""
    param = " ".join(param.split())
    if param in ("", "void"):
        return None
    m = re.match(r"^(.*?)(\w+)$", param)
    if not m or not m.group(1).strip():
        return (param, None)
    return (m.group(1), m.group(2))


def parse_functions(code, enum_names):
    funcs = []
    for m in re.finditer(r"\bMT_API\s+([^;{]*?)\b(mt_\w+)\s*\(([^)]*)\)\s*;", code, flags=re.S):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        if "..." in params:
            sys.exit(f"gen_holyc_header: {name}: variadic functions are not supported")
        hc_ret = map_type(ret, enum_names, name)
        hc_params = []
        for i, p in enumerate(params.split(",")):
            sp = split_param(p)
            if sp is None:
                continue
            ctype, pname = sp
            pname = pname or f"arg{i}"
            if pname in RESERVED:
                pname += "_"
            hc_params.append((map_type(ctype, enum_names, f"{name}({pname})"), pname))
        funcs.append((hc_ret, name, hc_params))
    return funcs


def fmt_decl(hc_ret, name, params):
    ps = ", ".join(f"{t}{'' if t.endswith('*') else ' '}{n}" for t, n in params)
    sep = "" if hc_ret.endswith("*") else " "
    return f'extern "c" {hc_ret}{sep}{name}({ps});'


def generate(header_text):
    code = strip_comments(header_text)
    enums = parse_enums(code)
    enum_names = {name for name, _ in enums}
    funcs = parse_functions(code, enum_names)
    macros = re.findall(r"^\s*#\s*define\s+(MT_(?:VERSION_\w+|ABI_VERSION))\s+(\S+)\s*$", code, flags=re.M)
    out = [
        "// minitorch.HH - the HolyC binding of libminitorch.so.",
        "// Generated from abi/minitorch.h by scripts/gen_holyc_header.py: do not edit by hand",
        "// (`make holyc-header` regenerates it; tests/holyc checks that it is current).",
        "//",
        "// hcrun resolves <minitorch> from MINITORCH_LIB when set, else libminitorch.so next to",
        "// the hcrun executable; hcc finds it on the loader path (LD_LIBRARY_PATH).",
        "",
        "#link <minitorch>",
        "",
    ]
    for name, value in macros:
        out.append(f"#define {name} {value}")
    for ename, consts in enums:
        out.append("")
        out.append(f"// {ename}")
        for cname, value in consts:
            out.append(f"#define {cname} {value}")
    out.append("")
    for f in funcs:
        out.append(fmt_decl(*f))
    out.append("")
    out.append("// feature tests: MT_HAVE_<function name without mt_, upper-cased> for every function above")
    for f in funcs:
        out.append(f"#define MT_HAVE_{f[1][3:].upper()} 1")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--header", default=HEADER)
    ap.add_argument("-o", "--output", default=OUTPUT, help="'-' for stdout")
    ap.add_argument("--check", action="store_true", help="compare with the output file instead of writing it")
    args = ap.parse_args()
    with open(args.header) as f:
        text = generate(f.read())
    if args.check and args.output == "-":
        ap.error("--check compares with a file: give -o PATH, not -o -")
    if args.check:
        try:
            with open(args.output) as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            print(f"{os.path.relpath(args.output, ROOT)} is stale: run `make holyc-header`", file=sys.stderr)
            return 1
        return 0
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
