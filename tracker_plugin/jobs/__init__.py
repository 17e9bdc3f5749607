"""Work over runs: read, analyse and write back one run or many; annotate, watch, backtest."""
