"""Human-facing reports: the HTML page, console text and plots."""
