"""Figures and pages, never gradio: Plotly heatmaps (plots, plots_core, plots_analysis,
plots_contrast), the offline HTML report (report, report_figures) and notebook views (show).

May import core, decode, data, train and analysis.
"""
