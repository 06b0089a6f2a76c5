"""Write the small math test files in tests/data/: one per layout (GSM8K, MATH, OpenR1), each as
JSONL and Parquet, and tests/data/arith/: one-line sums whose solution is the boxed answer
alone (the tiny model learns the format in a few SFT steps, so multi-process training tests
get mixed rewards from the real verifier). The problems are written for this project.

  python scripts/tools/make_test_data.py [--out=tests/data]
"""
import argparse
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

GSM8K = [
    ("A bakery sells muffins for $3 each. On Monday it sold 24 muffins and on Tuesday it sold 15 "
     "more than on Monday. How much money did the bakery make from muffins on the two days?",
     "On Tuesday it sold 24+15=<<24+15=39>>39 muffins.\nOver both days it sold 24+39=<<24+39=63>>63 "
     "muffins.\nThat earned 63*3=<<63*3=189>>189 dollars.\n#### 189"),
    ("Lena reads 12 pages of her book every weekday and 20 pages on each day of the weekend. How "
     "many pages does she read in two weeks?",
     "On weekdays she reads 5*12=<<5*12=60>>60 pages a week.\nOn the weekend she reads "
     "2*20=<<2*20=40>>40 pages.\nIn two weeks she reads 2*(60+40)=<<2*(60+40)=200>>200 pages.\n"
     "#### 200"),
    ("A farmer has 48 chickens. He sells a quarter of them and then buys 10 more. How many "
     "chickens does he have now?",
     "He sells 48/4=<<48/4=12>>12 chickens, leaving 48-12=<<48-12=36>>36.\nAfter buying more he "
     "has 36+10=<<36+10=46>>46 chickens.\n#### 46"),
    ("Tom's car uses 6 liters of fuel per 100 km. How many liters does he need for a trip of "
     "450 km?",
     "The trip is 450/100=<<450/100=4.5>>4.5 hundreds of km.\nHe needs 4.5*6=<<4.5*6=27>>27 "
     "liters.\n#### 27"),
    ("A school orders 7 boxes of pencils with 36 pencils in each box. The pencils are shared "
     "equally among 12 classes. How many pencils does each class get?",
     "There are 7*36=<<7*36=252>>252 pencils.\nEach class gets 252/12=<<252/12=21>>21 pencils.\n"
     "#### 21"),
    ("Maria earns $15 per hour and works 8 hours a day, 5 days a week. She saves 20% of her "
     "earnings. How much does she save in 4 weeks?",
     "She earns 15*8=<<15*8=120>>120 dollars a day and 120*5=<<120*5=600>>600 a week.\nIn 4 weeks "
     "she earns 600*4=<<600*4=2400>>2400 dollars.\nShe saves 2400*0.2=<<2400*0.2=480>>480 "
     "dollars.\n#### 480"),
    ("A rectangular garden is 18 meters long and 12 meters wide. A path 1 meter wide runs along "
     "the inside of its border. What is the area of the garden not covered by the path?",
     "The inner part is 18-2=<<18-2=16>>16 by 12-2=<<12-2=10>>10 meters.\nIts area is "
     "16*10=<<16*10=160>>160 square meters.\n#### 160"),
    ("Jake had 3 times as many marbles as Sam. After Jake gave Sam 10 marbles, they had the same "
     "number. How many marbles did Sam have at first?",
     "If Sam had s marbles, Jake had 3s, and 3s-10=s+10.\nSo 2s=20 and s=<<20/2=10>>10.\n#### 10"),
    ("A train travels at 80 km per hour for 2.5 hours and then at 60 km per hour for 1.5 hours. "
     "How far does it travel in total?",
     "First it covers 80*2.5=<<80*2.5=200>>200 km, then 60*1.5=<<60*1.5=90>>90 km.\nIn total "
     "200+90=<<200+90=290>>290 km.\n#### 290"),
    ("A store sells notebooks at 4 for $5. How much do 36 notebooks cost?",
     "36 notebooks are 36/4=<<36/4=9>>9 groups of four.\nThey cost 9*5=<<9*5=45>>45 dollars.\n"
     "#### 45"),
    ("There are 1,200 students in a school and 45% of them are boys. How many girls are there?",
     "Girls are 100-45=<<100-45=55>>55 percent of the students.\nThat is "
     "1200*0.55=<<1200*0.55=660>>660 girls.\n#### 660"),
    ("A water tank holds 2,500 liters and is filled at 125 liters per minute, starting empty. "
     "How many minutes until it is 80% full?",
     "80% of the tank is 2500*0.8=<<2500*0.8=2000>>2000 liters.\nFilling takes "
     "2000/125=<<2000/125=16>>16 minutes.\n#### 16"),
    ("A company makes 1,250 toys each day. How many toys does it make in 30 days?",
     "It makes 1250*30=<<1250*30=37500>>37500 toys.\n#### 37,500"),
]

MATH = [
    ("What is the value of $\\frac{3}{4} + \\frac{5}{6}$?",
     "With denominator $12$: $\\frac{9}{12} + \\frac{10}{12} = \\boxed{\\frac{19}{12}}$.",
     "Level 1", "Prealgebra"),
    ("Solve for $x$: $3x - 7 = 11$.",
     "Adding $7$ gives $3x = 18$, so $x = \\boxed{6}$.", "Level 1", "Algebra"),
    ("Find the sum of the roots of $x^2 - 5x + 6 = 0$.",
     "By Vieta's formulas the sum of the roots is $-\\frac{-5}{1} = \\boxed{5}$.",
     "Level 2", "Algebra"),
    ("Simplify $\\sqrt{50} + \\sqrt{18}$.",
     "$\\sqrt{50} = 5\\sqrt{2}$ and $\\sqrt{18} = 3\\sqrt{2}$, so the sum is "
     "$\\boxed{8\\sqrt{2}}$.", "Level 2", "Algebra"),
    ("How many positive divisors does $72$ have?",
     "$72 = 2^3 \\cdot 3^2$, so it has $(3+1)(2+1) = \\boxed{12}$ divisors.",
     "Level 3", "Number Theory"),
    ("What is the remainder when $2^{10}$ is divided by $7$?",
     "$2^3 = 8 \\equiv 1 \\pmod 7$, so $2^{10} = (2^3)^3 \\cdot 2 \\equiv 2$. The remainder is "
     "$\\boxed{2}$.", "Level 2", "Number Theory"),
    ("Find the distance between the points $(1, 2)$ and $(4, 6)$.",
     "The distance is $\\sqrt{3^2 + 4^2} = \\sqrt{25} = \\boxed{5}$.", "Level 1", "Algebra"),
    ("For what values of $x$ is $x^2 - 4 < 0$? Express your answer in interval notation.",
     "$x^2 < 4$ means $-2 < x < 2$, that is $x \\in \\boxed{(-2, 2)}$.", "Level 3", "Algebra"),
    ("Compute $\\dbinom{8}{3}$.",
     "$\\dbinom{8}{3} = \\frac{8 \\cdot 7 \\cdot 6}{3 \\cdot 2 \\cdot 1} = \\boxed{56}$.",
     "Level 1", "Counting & Probability"),
    ("If $f(x) = 2x^2 + 1$, what is $f(f(1))$?",
     "$f(1) = 3$, and $f(3) = 2 \\cdot 9 + 1 = \\boxed{19}$.", "Level 2", "Algebra"),
    ("What is the area of a circle with diameter $10$? Express your answer in terms of $\\pi$.",
     "The radius is $5$, so the area is $\\pi \\cdot 5^2 = \\boxed{25\\pi}$.",
     "Level 1", "Geometry"),
    ("Find the slope of the line through $(2, 3)$ and $(6, 11)$.",
     "The slope is $\\frac{11 - 3}{6 - 2} = \\frac{8}{4} = \\boxed{2}$.", "Level 1", "Algebra"),
    ("Evaluate $\\log_2 64$.", "$2^6 = 64$, so $\\log_2 64 = \\boxed{6}$.", "Level 1", "Algebra"),
    ("Express $0.\\overline{3}$ as a common fraction.",
     "If $x = 0.\\overline{3}$ then $10x - x = 3$, so $x = \\boxed{\\frac{1}{3}}$.",
     "Level 2", "Number Theory"),
]

OPENR1 = [
    ("Let $a$ and $b$ be positive integers with $a + b = 10$. What is the largest possible value "
     "of $ab$?", "25", "By AM-GM, $ab \\le 25$, with equality at $a = b = 5$. So $\\boxed{25}$."),
    ("Find the real number $x$ such that $2^{x+1} = 32$.", "4",
     "$32 = 2^5$, so $x + 1 = 5$ and $x = \\boxed{4}$."),
    ("A sequence satisfies $a_1 = 1$ and $a_{n+1} = 2a_n + 1$. Find $a_6$.", "63",
     "The terms are $1, 3, 7, 15, 31, 63$; in general $a_n = 2^n - 1$. So $a_6 = \\boxed{63}$."),
    ("In how many ways can 5 people sit in a row if two particular people must sit next to each "
     "other?", "48",
     "Glue the pair into one block: $4!$ orders of 4 units, times $2$ orders inside the block, "
     "gives $\\boxed{48}$."),
    ("Compute the sum $1 + 3 + 5 + \\cdots + 99$.", "2500",
     "These are the first $50$ odd numbers, whose sum is $50^2 = \\boxed{2500}$."),
    ("Find the minimum value of $x^2 - 6x + 13$ over real $x$.", "4",
     "$x^2 - 6x + 13 = (x - 3)^2 + 4$, so the minimum is $\\boxed{4}$."),
    ("What is the last digit of $7^{2023}$?", "3",
     "Last digits of powers of 7 cycle $7, 9, 3, 1$. Since $2023 \\equiv 3 \\pmod 4$, the last "
     "digit is $\\boxed{3}$."),
    ("The angles of a triangle are in the ratio $2:3:4$. What is the largest angle in degrees?",
     "80", "The angles are $20^\\circ \\cdot (2, 3, 4)$, so the largest is $\\boxed{80}$."),
    ("Find the sum of all solutions of $|2x - 3| = 7$.", "3",
     "$2x - 3 = \\pm 7$ gives $x = 5$ or $x = -2$, whose sum is $\\boxed{3}$."),
    ("Find $\\gcd(84, 126)$.", "42",
     "$84 = 2^2 \\cdot 3 \\cdot 7$ and $126 = 2 \\cdot 3^2 \\cdot 7$, so the gcd is "
     "$2 \\cdot 3 \\cdot 7 = \\boxed{42}$."),
    ("If $x + \\frac{1}{x} = 3$, find $x^2 + \\frac{1}{x^2}$.", "7",
     "Squaring gives $x^2 + 2 + \\frac{1}{x^2} = 9$, so the answer is $\\boxed{7}$."),
    ("A fair die is rolled twice. What is the probability that the sum is 7?", "\\frac{1}{6}",
     "Six of the 36 outcomes sum to 7, so the probability is $\\boxed{\\frac{1}{6}}$."),
]


# (a, b) of "What is a + b?": 24 sums, two digits each side.
ARITH = [(12, 7), (23, 14), (31, 45), (8, 56), (47, 22), (15, 15), (64, 3), (29, 38),
         (50, 41), (17, 26), (72, 9), (33, 33), (41, 18), (26, 52), (9, 80), (55, 34),
         (18, 61), (44, 27), (36, 19), (60, 25), (21, 68), (13, 49), (70, 14), (39, 40)]


def rows():
    """{file stem: list of row dicts} for the three layouts and the sums (arith/)."""
    return {
        "gsm8k_sample": [dict(question=q, answer=a) for q, a in GSM8K],
        "math_sample": [dict(problem=p, solution=s, level=l, type=t) for p, s, l, t in MATH],
        "openr1_sample": [dict(problem=p, answer=a, solution=s) for p, a, s in OPENR1],
        "arith/arith_sample": [dict(problem=f"What is {a} + {b}?",
                                    solution=f"\\boxed{{{a + b}}}") for a, b in ARITH],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                                                      "data"))
    args = parser.parse_args()
    for stem, data in rows().items():
        os.makedirs(os.path.dirname(os.path.join(args.out, stem)), exist_ok=True)
        with open(os.path.join(args.out, stem + ".jsonl"), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in data)
        pq.write_table(pa.Table.from_pylist(data), os.path.join(args.out, stem + ".parquet"))
        print(f"{stem}: {len(data)} rows")


if __name__ == "__main__":
    main()
