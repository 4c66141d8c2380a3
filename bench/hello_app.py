"""The floor Streamlit itself sets on this machine: a number input and one metric.

``bench/bench_journey.py`` measures dcsim against this app in the same run, so a shared, noisy
machine's swings cancel out in the ratio. Its labels match the Model page's, so one probe reads
both.
"""

from fractions import Fraction

import streamlit as st

shards = st.number_input("Number of checkpoint shards", min_value=1, max_value=1 << 20, value=2, step=1)
share = Fraction(20, int(shards))
st.metric(f"Ideal share per shard ({int(shards):,} shards)", f"{float(share):g}")
