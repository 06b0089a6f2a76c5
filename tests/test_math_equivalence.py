r"""The math verifier pool on equivalence classes ported from math-verify's own test suite.

Each case is (label, gold, pred): `gold` is the reference answer and `pred` the content of the
model's last `\boxed{}` (the only part the pool reads), both LaTeX. They come from
huggingface/Math-Verify tests (test_all.py, test_yujianll.py, test_numina_cases.py,
test_open_thoughts.py): where an upstream prediction is prose, its boxed or final answer is
taken; cases about extracting answers from prose, about non-default options (precision,
strict=False), with several boxes, or with identical gold and prediction (the pool scores those 1
without math-verify) are left out, and so are six that math-verify 0.9.0 itself gets wrong in this
form (`\sqrt{2}` vs `\sqrt{2}.`, `(1,2)` vs `(1,2).`, `5` vs `5 \text{ cm}.`, `42` vs `42.`,
`P(x) = 1` vs `p(x) = 1`, `p = 5, q = 2 \quad \text{and} \quad p = 7, q = 2` vs
`p=5,q=2;p=7,q=2`). That leaves 148; a last group of 17 adds the hard classes below.

Plain `math_verify.verify` on the same boxed inputs agrees with every label here; before the fix
of the guard the pool agreed on 145 of these 165 cases.
"""
from ada_jax.rewards.math_verifier import MathVerifierPool

CASES = [
    # test_all.py: test_number_extraction (numbers as LaTeX)
    (1, "7425000", "7,425,000"),
    (1, "1000", "1000.0"),
    (1, "1000.0", "1,000.0"),
    (1, "1000.99", "1,000.99"),
    (1, "0.4", ".4"),
    (1, "1000.99", r"\$1,000.99"),
    # test_simple_fraction_notation
    (1, "10/9", r"\frac{10}{9}"),
    (1, "-10/9", r"-\frac{10}{9}"),
    # test_sets_handling
    (0, "[0,9)", "[0,1)"),
    (0, "(0,9)", "[0,9)"),
    (0, "1", "-[0,1)"),
    # test_latex_notation
    (1, "10", "(9+1)"),
    (1, "1/3", r"\frac13"),
    (1, "1", r"\frac3{3}"),
    (1, r"\sqrt{3}", r"\sqrt3"),
    (1, "1/3", r"\cfrac{1}{3}"),
    (1, "1/3", r"\dfrac{1}{3}"),
    (1, "1/3", r"\tfrac{1}{3}"),
    (1, "1/3", r"\left( \frac{1}{3} \right)"),
    (1, "1/3", r"\frac{1}{3} \text{meters}"),
    (1, "1/3", r"\frac{1}{3} \textbf{meters}"),
    (1, "1/3", r"k = \frac{1}{3}"),
    # test_percent_notation
    (1, r"28\%", "28"),
    (1, r"28\%", "28 pct"),
    (1, r"28\%", "28 percent"),
    (1, r"28\%", "28 percentage"),
    (0, "0.28", "28"),
    (0, "28/100", "28"),
    (0, "28", "28/100"),
    (0, r"\frac{28}{100}", "28"),
    (0, r"28*\frac{1}{100}", "28"),
    # test_latex_notation_math
    (1, "14{,}916", "14 {, }916"),
    (1, r"(3, \frac{\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)"),
    (1, "125 miles", r"125\textnormal{ miles}"),
    (1, r"[-1, -\frac{1}{2}) \cup (-\frac{1}{2}, 0) \cup (0, 1) \cup (1, \infty)",
     r"[-1, -\tfrac12) \cup (-\tfrac12, 0) \cup (0, 1) \cup (1, \infty)"),
    (1, r"\sqrt{2}+\sqrt{5}", r"\sqrt 2+\sqrt 5"),
    (1, r"\frac{9}{4}\pi", r"\frac94\pi"),
    # test_relations_math
    (1, "x >= 5", r"x \geq 5"),
    (1, "x < 3", r"x \lt 3"),
    (1, r"x \leq 2", "x <= 2"),
    (1, "x > 5", r"x \gt 5"),
    (1, "x != 3", r"x \neq 3"),
    (0, "x > 5", "x < 5"),
    (0, r"x \geq 5", r"x \leq 5"),
    (1, r"x \neq 5", "x != 5"),
    (1, r"x \leq 5", r"5 \geq x"),
    (1, r"x \geq 5", r"5 \leq x"),
    (1, "x = 11", "x = 5+5+1 = 7 =11"),
    (0, "7 = 11a+c", "11a+c"),
    (1, "x = 1/3", r"x = 5+5+1 = 1/3 \approx 11"),
    (1, "11", "x=11"),
    (1, "11", r"x\approx11"),
    (1, "1/3", r"x=1/3\approx1.3"),
    (1, "x < 1", "-x > -1"),
    (0, "x < 1", "x > -1"),
    (1, "x <= 1", "-x >= -1"),
    (0, "a +3z = 0", "0"),
    (1, r"1 = \zzz = x = 0", "0"),
    (0, "2x + z = 1", "1"),
    (0, "a^2 + b = 0", "0"),
    (1, "k=1", "1"),
    (1, "1", "k=1"),
    (1, "z = 1 + 1 = 2", "z = 3+3 = 2"),
    (1, "2x+4y-3=0", r"y=-\frac{1}{2}x+\frac{3}{4}"),
    (1, "x^2/4 + y^2/3 = 1", "x^2/16 + y^2/12 = 1/4"),
    # test_matrix_extraction
    (1, r"\begin{bmatrix}0 & 0 \\0 & 0\end{bmatrix}", r"\begin{pmatrix}0 & 0 \\0 & 0\end{pmatrix}"),
    (1, r"\begin{pmatrix}1 & 2 \\3 & 4\end{pmatrix}",
     r"\left[\begin{array}{cc}1 & 2 \\3 & 4\end{array}\right]"),
    (1, r"\begin{pmatrix}6 & 8 \\ 10 & 12\end{pmatrix}",
     r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} + \begin{pmatrix}5 & 6 \\ 7 & 8\end{pmatrix}"),
    (1, r"\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix}",
     r"\begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix} \begin{pmatrix}1 & 0 \\ 0 & 1\end{pmatrix}"),
    (0, r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix}",
     r"\begin{pmatrix}1 & 2 \\ 3 & 5\end{pmatrix}"),
    # test_complex_math_expressions (default precision)
    (1, r"\frac{1}{12}", "0.0833333333333333"),
    (1, r"(1,\frac{9}{2})", "(1,4.5)"),
    (1, r"\frac{x+2}{7}", r"\frac{x}{7}+\frac{2}{7}"),
    (1, r"\tan^2(y)+1", r"\sec^2(y)"),
    (1, r"\begin{pmatrix}\frac{1}{3\sqrt[3]{x}^2}&0&0\\0&1&0\\-\sin(x)&0&0\\\end{pmatrix}",
     r"\begin{pmatrix}\frac{1}{3x^{2/3}}&0&0\\0&1&0\\-\sin(x)&0&0\end{pmatrix}"),
    (1, "34x+45y-20z+100=0", "-34x-45y+20z-100=0"),
    (1, r"\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{15+2\sqrt{33}}",
     r"\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{2\sqrt{33}+15}"),
    (0, "(a+5)(b+2)", "(+5)(b+2)"),
    (0, "2", r"\frac{1+\sqrt{5}}{2}"),
    (0, "4", r"\frac{34}{16}+\frac{\sqrt{1358}}{16}"),
    (0, r"1\sqrt{19}", "1"),
    (0, "x+2n+1", "x+1"),
    # test_math_extraction_edge_cases
    (0, "[0,1)", "(0, 1)"),
    (0, "[-3,2]", r"(-\infty, -3] \cup [2, \infty)"),
    (1, "16386.20", r"\$16,\!386.20"),
    (1, "12000023", "12,000,023"),
    (1, "14916", "14{,}916"),
    (1, r"\left(\frac{1}{5},\frac{1}{6}\right)", r"\left( \frac{1}{5}, \frac{1}{6} \right)"),
    (1, r"\left(\frac{4}{5},\frac{1}{5}\right)", r"\left( \frac{4}{5}, \frac{1}{5} \right)"),
    (1, r"\frac{5\sqrt{42}}{27}", r"\frac{10\sqrt{10.5}}{27}"),
    (1, "16386.17", r"\$16386.17"),
    (1, "20", r"20 \%"),
    # test_math_extraction_additional_cases
    (1, "[-2, 7]", r"x \in [-2,7]"),
    (0, r"(\tfrac{27}{8},\tfrac{15}{8})", "(0, 0)"),
    (0, "(3,1)", "{1,3}"),
    (1, "(1,3)", "{1,3}"),
    (1, "10455", "10,455"),
    (1, "[-4,0]", "[-4, 0]"),
    (0, "1112112_3", "1112122_3"),
    (1, r"\text{C}", r"\text{(C)}"),
    (1, "11111111100", r"11,\! 111,\! 111,\! 100"),
    (1, "32349", r"32,\! 349"),
    (0, "32349", "32, 349"),
    (1, r"(2, 12) \cup (12, 102)", r"(2,12) \cup (12,102)"),
    (1, r"\text{E}", "E"),
    # test_set_rel_assymetry (default allow_set_relation_comp=False)
    (1, r"-2 \le x \le 7", r"x \in [-2,7]"),
    (0, r"x \in [-2,7]", r"-2 \le x \le 7"),
    # test_sqrt_precision
    (0, "4", r"4\sqrt{2}"),
    # test_trailing_punctuation
    (1, r"\frac{1}{3}", r"\frac{1}{3}."),
    (1, r"\frac{1}{3}", r"\frac{1}{3},"),
    (1, r"\frac{1}{3}", r"\frac{1}{3} ."),
    (0, "2", "2^{10}."),
    (0, "1, 2, 3", "1, 2, 3, ..."),
    # test_yujianll.py
    (0, "n=2, 3, 4", "n=1, 2, 3"),
    (0, "D = (0, 1)", "D = (0, 1.5)"),
    (0, r"F_n = \sum_{k=0}^{n-1} F_k F_{n-k-1}", r"F_n = \sum_{k=0}^{n-2} F_k F_{n-k-2}"),
    (1, r"F_n = \sum_{k=0}^{n-1} F_k F_{n-k-1}", r"F_n = \sum_{k=0}^{n-1} F_{n-k-1} F_k"),
    (1, "19, 46, and 82", r"19, 46, \text{ and } 82"),
    (0, "19, 46, and 82", "21, 36, and 82"),
    (0, r"1 - \frac{1}{\mathrm{e}}", r"1 + \frac{1}{\mathrm{e}}"),
    (0, r"\pm 2021", "2021"),
    (1, r"\pm 2021", "{-2021, 2021}"),
    (0, "12:00", "1:00"),
    # test_numina_cases.py
    (1, "(37,3,3,13),(17,3,3,7),(3,37,3,13),(3,17,3,7),(3,3,2,3)",
     "(3, 37, 3, 13), (3, 17, 3, 7), (3, 3, 2, 3), (3,17,3,7), (17,3,3,7), (37,3,3,13)"),
    (0, "(37,3,3),(17,3,3,7),(3,37,3,13),(3,17,3,7),(3,3,2,3)",
     "(3, 37, 3, 13), (3, 17, 3, 7), (3, 3, 2, 3), (3,17,3,7), (17,3,3,7), (37,3,3,13)"),
    (1, "(p,q)=(3,2)", "(3,2)"),
    (1, "(0;0;0),(0;-2;0),(0;0;6),(0;-2;6),(4;0;0),(4;-2;0),(4;0;6),(4;-2;6)",
     "(4, 0, 6), (4, -2, 6), (0, 0, 6), (0, -2, 6), (4, 0, 0), (4, -2, 0), (0, 0, 0), (0, -2, 0)"),
    (1, r"1\leq|z|\leq \frac{3}{2}",
     r"z \in \left[-\frac{3}{2}, -1\right] \cup \left[1, \frac{3}{2}\right]"),
    (1, "-12;-11;-10;-8;-7;-6", r"\{-12, -11, -10, -8, -7, -6\}"),
    (1, "AB=4,CD=5", "4, 5"),
    (1, "(11,7)or(7,11)", r"(7,11),\ (11,7)"),
    (1, "S_{MBCN}:S=7:32", "7:32"),
    (1, r"\frac{NO}{BO}=\frac{1}{\sqrt{6}}", r"\frac{1}{\sqrt{6}}"),
    (1, "p=5,q=2;p=7,q=2", "(5,2),(7,2)"),
    (1, "(p,q,r)=(3,2,7)", "(3,2,7)"),
    (1, "V_{1}:V_{2}=11:21", "11:21"),
    (1, r"\text{odd}", "odd"),
    (1, r"\text{e}", "e"),
    (0, "d", r"\text{E}"),
    (1, "(p,q)=(3,2)", "(3, 2)"),
    (1, r"x = -5,\ p = \frac{14}{3}", r"-5, \frac{14}{3}"),
    (1, r"a=4,\,-8,\,-10", "-10,-8,4"),
    (1, r"p = -1 \text{ and } p = \dfrac{15}{8}", r"p=-1,p=\frac{15}{8}"),
    (1, "0<f(x)<1", "(0,1)"),
    (1, r"6 \text{ and } 8", "6,8"),
    # test_open_thoughts.py
    (1, "-793 < a < 10", "(-793, 10)"),
    (1, "a_3 = 2, a_{37} = 19", r"a_{37} = 19, \quad a_3 = 2"),
    (1, "(5, 8), (8, 5)", r"(x, y) = (5, 8) \quad \text{and} \quad (8, 5)"),
    # the hard classes: polynomials, rational functions, trig, intervals, 10^k
    (1, "x^2+2x+1", "(x+1)^2"),
    (1, "(x+1)^2", "x^2+2x+1"),
    (0, "x^2+2x+1", "(x-1)^2"),
    (1, "x^3-1", "(x-1)(x^2+x+1)"),
    (1, r"\frac{x^2-1}{x-1}", "x+1"),
    (1, r"\frac{1}{x}+\frac{1}{y}", r"\frac{x+y}{xy}"),
    (0, r"\frac{1}{x}+\frac{1}{y}", r"\frac{2}{x+y}"),
    (1, r"\sin^2 x+\cos^2 x", "1"),
    (1, r"2\sin x\cos x", r"\sin 2x"),
    (1, r"\cos^2 x-\sin^2 x", r"\cos 2x"),
    (1, r"1<x\le 2", "(1,2]"),
    (1, r"x\geq 3", r"[3,\infty)"),
    (0, r"1\le x<2", "(1,2]"),
    (1, "1500", r"1.5\times10^{3}"),
    (1, "1500", "1.5E3"),
    (1, r"2.5\times 10^{-3}", "0.0025"),
    (0, "1500", r"1.5\times10^{4}"),
]


def test_ported_math_verify_cases_score_their_labels():
    """Symbolic equivalences (which go through sympy's simplify) must score like math-verify."""
    with MathVerifierPool(num_workers=2, timeout_s=20.0) as pool:
        scores = pool.score([f"\\boxed{{{p}}}" for _, _, p in CASES], [g for _, g, _ in CASES])
        assert (pool.n_timeouts, pool.n_crashes) == (0, 0)
    wrong = [(g, p, e) for (e, g, p), s in zip(CASES, scores) if s != e]
    assert not wrong, f"{len(wrong)} of {len(CASES)} disagree with math-verify's labels: {wrong}"
