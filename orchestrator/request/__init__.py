"""What a `POST /v1/responses` request says: its body and parameters, its input items and their references."""
