"""The host side: what a client needs to put elicitation in front of a person safely."""

from mcp_elicit.client.url_review import UrlReview, UrlWarning, review_url

__all__ = ["UrlReview", "UrlWarning", "review_url"]
