#!/usr/bin/env python3
"""Reference values for bbrscope's always-valid interval (bbrscope/src/experiment/decide.rs).

Computed independently of bbrscope's closed form: the normal-mixture likelihood ratio of an
estimate x ~ N(theta, V) against theta = 0, mixing theta over N(0, tau^2), is integrated
numerically (scipy.integrate.quad) and the boundary x where it reaches 1/alpha is found by root
finding (scipy.optimize.brentq). Also the normal quantiles the secondary tables use.
Run: python3 scripts/reference/cs_boundary.py (needs scipy; not part of the build or tests).
"""
import math

from scipy import integrate, optimize
from scipy.stats import norm

TAU = 0.15


def mixture_ratio(x, v):
    sd = math.sqrt(v)
    num, _ = integrate.quad(lambda t: norm.pdf(x, t, sd) * norm.pdf(t, 0.0, TAU), -1.0, 1.0,
                            epsabs=0, epsrel=1e-12, limit=500, points=[0.0, x])
    return num / norm.pdf(x, 0.0, sd)


def boundary(v, alpha):
    f = lambda x: math.log(mixture_ratio(x, v)) - math.log(1.0 / alpha)
    return optimize.brentq(f, 1e-9, 0.99, xtol=1e-14, rtol=1e-13)


for v, alpha in [(1e-2, 0.05), (1e-3, 0.05), (1e-4, 0.05), (4e-4, 0.05 / 6), (2.5e-3, 0.01),
                 (1e-5, 0.05 / 40)]:
    print(f"({v!r}, {alpha!r}, {boundary(v, alpha)!r}),")
for p in [0.975, 0.995, 0.9]:
    print(f"normal quantile {p}: {norm.ppf(p)!r}")
