#!/usr/bin/env python3
"""gen_sales.py - writes data/sales.tsv, a year of synthetic retail transactions.

The original sales.tsv is private; this reproduces its schema with a documented
random model and a fixed seed, so every machine generates the same file
(the standard library only; about 366K rows, ~35 MB, a few seconds).

Schema: 10 tab-separated columns, no header, one transaction per line:

  0 product name   e.g. "Dairy Brook 017"
  1 product code   e.g. "P03-0017"
  2 date           YYYY-MM-DD
  3 timestamp      YYYY-MM-DD HH:MM:SS.mmm (the same day)
  4 quantity       float: units (1, 2, ...) or kilograms (0.125 .. 3) for weighed goods
  5 unit price     float, per unit or per kilogram
  6 category       one of 16 names below
  7 user           e.g. "u004711"
  8 total price    float: the regression target
  9 id             int, 1.. in time order

The random model (all draws from random.Random(seed)):

  days       every day of the year (2024: 366 days); the day's share of the rows is
             proportional to weekday(d) * season(d), weekday = 1.35 Sat, 1.20 Sun, 1.0
             otherwise, season = 1 + 0.3 cos(2 pi (doy - 358) / 366) (a December peak).
  time       hour ~ triangular(8, 22, mode 17), then uniform minutes, seconds, ms.
  product    category c uniform over the 16; then one of its 100 products, chosen with
             weights 1/(k+1) (a few best sellers). Each product has a base price
             base = median_c * exp(N(0, sigma_c)), fixed for the year.
  unit price base * (1 + 0.04 * doy / days_in_year) (inflation over the year), to cents.
  quantity   weighed categories: uniform(0.1, 3.0) kg to grams; others:
             1 + floor(Exponential(mean extra_c)), capped at 24 units.
  user       one of 20000, with weights 1/(u+1)^0.8.
  total      quantity * unit price * (1 + tax_c) * (1 - promo) * (1 + N(0, 0.02)), to cents,
             at least 0.01, where tax_c is the category's tax rate and promo = 0.15 in the
             category's promotion month (promo_month_c), else 0.10 on Black Friday week
             (Nov 25 - Dec 1) for non-food categories, else 0.

So total price is about quantity x unit price, scaled by a category effect and a date
effect, with 2% noise: a regression on quantity, unit price, category (one-hot) and
day of year can learn it, and the mean predictor is a poor baseline.

Usage: scripts/gen_sales.py [--out PATH|-] [--rows N] [--seed S] [--year Y]
"""
import argparse
import bisect
import datetime
import itertools
import math
import os
import random
import sys

# name, median unit price, log-sigma of product prices, weighed (kg)?, mean extra units,
# tax rate, promotion month, food?
CATEGORIES = [
    ("Produce",       3.00, 0.45, True,  0.0, 0.00, 6,  True),
    ("Meat",         12.00, 0.40, True,  0.0, 0.00, 7,  True),
    ("Seafood",      18.00, 0.40, True,  0.0, 0.00, 3,  True),
    ("Dairy",         2.50, 0.35, False, 1.2, 0.00, 2,  True),
    ("Bakery",        3.50, 0.35, False, 1.0, 0.00, 9,  True),
    ("Beverages",     2.00, 0.45, False, 3.0, 0.05, 8,  True),
    ("Snacks",        2.80, 0.40, False, 1.5, 0.05, 10, True),
    ("Frozen",        5.50, 0.40, False, 0.8, 0.00, 1,  True),
    ("Pantry",        3.20, 0.50, False, 1.0, 0.00, 4,  True),
    ("Household",     6.50, 0.50, False, 0.6, 0.19, 5,  False),
    ("Personal Care", 7.50, 0.45, False, 0.5, 0.19, 11, False),
    ("Baby",         14.00, 0.40, False, 0.5, 0.07, 3,  False),
    ("Pet",          11.00, 0.50, False, 0.7, 0.19, 9,  False),
    ("Electronics",  65.00, 0.80, False, 0.1, 0.19, 12, False),
    ("Toys",         22.00, 0.60, False, 0.3, 0.19, 12, False),
    ("Apparel",      28.00, 0.55, False, 0.4, 0.19, 4,  False),
]
PRODUCTS_PER_CATEGORY = 100
USERS = 20000
BRANDS = ["Acme", "Brook", "Cedar", "Delta", "Ember", "Fjord", "Grove", "Harbor", "Iris", "Juniper",
          "Kestrel", "Linden", "Maple", "Nimbus", "Orchid", "Pine", "Quarry", "Ridge", "Sable", "Tundra"]


def parse_args(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(root, "data", "sales.tsv"), help="output path, '-' for stdout")
    p.add_argument("--rows", type=int, default=366000, help="number of transactions (default 366000)")
    p.add_argument("--seed", type=int, default=20240101, help="random seed (default 20240101)")
    p.add_argument("--year", type=int, default=2024, help="calendar year (default 2024, a leap year)")
    a = p.parse_args(argv)
    if a.rows < 1:
        p.error("--rows must be >= 1")
    if not 1 <= a.year <= 9998:  # the year after it must exist too (datetime stops at 9999)
        p.error("--year must be 1..9998")
    return a


def day_counts(year, rows):
    """Rows per day: proportional to weekday x season, summing to exactly `rows`."""
    start = datetime.date(year, 1, 1)
    ndays = (datetime.date(year + 1, 1, 1) - start).days
    weights = []
    for i in range(ndays):
        d = start + datetime.timedelta(days=i)
        wd = {5: 1.35, 6: 1.20}.get(d.weekday(), 1.0)
        season = 1 + 0.3 * math.cos(2 * math.pi * (i + 1 - 358) / ndays)
        weights.append(wd * season)
    total = sum(weights)
    exact = [rows * w / total for w in weights]
    counts = [int(e) for e in exact]
    # the largest remainders get the rows that rounding down left over
    for i in sorted(range(ndays), key=lambda i: exact[i] - counts[i], reverse=True)[:rows - sum(counts)]:
        counts[i] += 1
    return start, ndays, counts


def main(argv):
    a = parse_args(argv)
    rng = random.Random(a.seed)

    # Products: per category 100, base prices fixed for the year.
    products = []  # per category: list of (name, code, base price)
    for c, (cname, median, sigma, *_rest) in enumerate(CATEGORIES):
        plist = []
        for k in range(PRODUCTS_PER_CATEGORY):
            base = median * math.exp(rng.gauss(0.0, sigma))
            name = "%s %s %03d" % (cname, BRANDS[k % len(BRANDS)], k)
            plist.append((name, "P%02d-%04d" % (c, k), base))
        products.append(plist)
    prod_cum = list(itertools.accumulate(1.0 / (k + 1) for k in range(PRODUCTS_PER_CATEGORY)))
    user_cum = list(itertools.accumulate(1.0 / (u + 1) ** 0.8 for u in range(USERS)))
    black_friday = (datetime.date(a.year, 11, 25), datetime.date(a.year, 12, 1))

    start, ndays, counts = day_counts(a.year, a.rows)
    out = sys.stdout if a.out == "-" else None
    if out is None:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        out = open(a.out, "w", newline="\n")
    next_id = 1
    try:
        for i in range(ndays):
            day = start + datetime.timedelta(days=i)
            doy = i + 1
            date = day.isoformat()
            inflation = 1 + 0.04 * doy / ndays
            in_bf = black_friday[0] <= day <= black_friday[1]
            times = sorted(int(rng.triangular(8, 22, 17) * 3600000) + rng.randrange(60000) for _ in range(counts[i]))
            lines = []
            for t_ms in times:
                c = rng.randrange(len(CATEGORIES))
                cname, _median, _sigma, weighed, extra, tax, promo_month, food = CATEGORIES[c]
                k = bisect.bisect_left(prod_cum, rng.random() * prod_cum[-1])
                name, code, base = products[c][k]
                price = round(base * inflation, 2) or 0.01
                if weighed:
                    qty = round(rng.uniform(0.1, 3.0), 3)
                else:
                    qty = float(min(24, 1 + int(rng.expovariate(1.0 / extra)) if extra > 0 else 1))
                promo = 0.15 if day.month == promo_month else (0.10 if in_bf and not food else 0.0)
                noise = 1 + rng.gauss(0.0, 0.02)
                total = max(0.01, round(qty * price * (1 + tax) * (1 - promo) * noise, 2))
                user = bisect.bisect_left(user_cum, rng.random() * user_cum[-1])
                t_ms = min(t_ms, 24 * 3600000 - 1)
                hh, rem = divmod(t_ms, 3600000)
                mm, rem = divmod(rem, 60000)
                ss, ms = divmod(rem, 1000)
                lines.append("%s\t%s\t%s\t%s %02d:%02d:%02d.%03d\t%g\t%.2f\t%s\tu%06d\t%.2f\t%d\n"
                             % (name, code, date, date, hh, mm, ss, ms, qty, price, cname, user, total, next_id))
                next_id += 1
            out.writelines(lines)
    finally:
        if out is not sys.stdout:
            out.close()
    if a.out != "-":
        print("gen_sales: wrote %d rows to %s (seed %d, year %d)" % (next_id - 1, a.out, a.seed, a.year),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
