"""``attnviz bench``: the benchmark suite (suite), the app's and the browser's rows (app) and
the offline report's rows (report).

The top layer: may import anything in attnviz.
"""
