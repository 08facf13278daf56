#!/usr/bin/env python3
"""Generates the census-style sample data set of Weir's main example job.

Rows look like the UCI "Adult" census data: age, workclass, education, occupation,
hours_per_week, income. The values are synthetic and drawn from a fixed seed, so running
this script again reproduces the committed files byte for byte:

    python3 examples/data/census/generate.py --rows 20000 --files 4
"""

import argparse
import csv
import os
import random

WORKCLASS = ["Private", "Self-emp", "Local-gov", "State-gov", "Federal-gov", "Without-pay"]
EDUCATION = ["11th", "HS-grad", "Some-college", "Assoc", "Bachelors", "Masters", "Doctorate"]
OCCUPATION = [
    "Tech-support", "Craft-repair", "Sales", "Exec-managerial", "Prof-specialty",
    "Handlers-cleaners", "Machine-op", "Adm-clerical", "Transport", "Protective-serv",
]


def row(rng):
    education = rng.choice(EDUCATION)
    age = rng.randint(17, 80)
    hours = max(1, min(99, int(rng.gauss(40, 11))))
    # Higher education and more hours make the higher income class more likely.
    score = EDUCATION.index(education) * 0.08 + (hours - 40) * 0.01 + (age - 30) * 0.005
    income = ">50K" if rng.random() < 0.2 + score else "<=50K"
    return [age, rng.choice(WORKCLASS), education, rng.choice(OCCUPATION), hours, income]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1994)
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    per_file = (args.rows + args.files - 1) // args.files
    written = 0
    for f in range(args.files):
        path = os.path.join(args.out, f"census-{f}.csv")
        with open(path, "w", newline="") as out:
            w = csv.writer(out, lineterminator="\n")
            w.writerow(["age", "workclass", "education", "occupation", "hours_per_week", "income"])
            for _ in range(min(per_file, args.rows - written)):
                w.writerow(row(rng))
                written += 1
    print(f"wrote {written} rows into {args.files} files under {args.out}")


if __name__ == "__main__":
    main()
