"""People's and admins' pages: a person's memory, receipts and connected
apps; workspace administration. Function views that parse input, call one
service and render; who may do what is memoryhub.access's, asked by the
services. The review console is its own app (reviews/)."""
