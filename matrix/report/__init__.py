"""What people read: the self-contained report.html and the pages across runs (publish), the
terminal tables and progress (console), JUnit XML, the upgrade view (A → B), how a worst error is
written (error_text), and re-judging a stored run with new tolerances (rejudge). Reads stored runs;
never runs a cell.
"""
